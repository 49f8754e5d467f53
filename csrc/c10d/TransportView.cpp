#include "TransportView.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace openreg::ccl {

TransportView::TransportView(Transport& parent, std::vector<int> ranks)
    : parent_(parent), ranks_(std::move(ranks)) {
  auto it = std::find(ranks_.begin(), ranks_.end(), parent.rank());
  TORCH_CHECK(it != ranks_.end(), "oreg_ccl: a transport view must include its own rank");
  rank_ = static_cast<int>(it - ranks_.begin());
}

}  // namespace openreg::ccl
