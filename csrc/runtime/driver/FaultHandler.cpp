// Turns a host access to device memory (a SIGSEGV inside a device's PROT_NONE
// mapping) into a readable message before the process dies, the way a GPU
// would report an illegal address. Other faults go to the previous handler.
#include "Internal.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace openreg::detail {
namespace {

struct sigaction g_previous;
bool g_print_backtrace = false;

void onSegv(int sig, siginfo_t* info, void* context) {
  int device = deviceOfInaccessibleAddress(info->si_addr);
  if (device >= 0) {
    char message[320];
    int n = std::snprintf(
        message, sizeof(message),
        "openreg: illegal host access to device memory at %p (openreg:%d). Device memory "
        "is only reachable by openreg kernels; copy the tensor to the host with "
        ".cpu() before reading it.\n",
        info->si_addr, device);
    if (n > 0) (void)!write(STDERR_FILENO, message, static_cast<size_t>(n));
  }
  if (device < 0 && g_print_backtrace) {
    // OPENREG_SEGV_BACKTRACE=1: native frames of the faulting thread, for
    // crashes in kernels or collectives that Python's faulthandler cannot show.
    void* frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
  }
  // Hand over to whoever was there before (Python's faulthandler, or the
  // default action, which re-raises the fault and kills the process).
  sigaction(SIGSEGV, &g_previous, nullptr);
  if (!(g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_handler == SIG_DFL) return;
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != SIG_DFL) {
    g_previous.sa_handler(sig);
  }
}

}  // namespace

void installFaultHandler() {
  const char* env = std::getenv("OPENREG_SEGV_BACKTRACE");
  g_print_backtrace = env && *env && env[0] != '0';
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = onSegv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &g_previous);
}

}  // namespace openreg::detail
