// Native kernels for the hot operators of a training step (issue 3's list),
// registered for PrivateUse1 in RegisterOpenReg.cpp. Everything else runs
// through the generic fallback (Fallback.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

namespace openreg::kernels {

// Pointwise.cpp
at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor& sub_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor mul(const at::Tensor& self, const at::Tensor& other);
at::Tensor& mul_(at::Tensor& self, const at::Tensor& other);
at::Tensor div(const at::Tensor& self, const at::Tensor& other);
at::Tensor& div_(at::Tensor& self, const at::Tensor& other);
at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out);
at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out);
at::Tensor& mul_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out);
at::Tensor& div_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out);
at::Tensor lerp(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight);
at::Tensor& lerp_(at::Tensor& self, const at::Tensor& end, const at::Scalar& weight);
at::Tensor& lerp_out(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight,
                     at::Tensor& out);
at::Tensor addcmul(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                   const at::Scalar& value);
at::Tensor& addcmul_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                     const at::Scalar& value);
at::Tensor& addcmul_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                        const at::Scalar& value, at::Tensor& out);
at::Tensor addcdiv(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                   const at::Scalar& value);
at::Tensor& addcdiv_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                     const at::Scalar& value);
at::Tensor& addcdiv_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                        const at::Scalar& value, at::Tensor& out);
at::Tensor exp(const at::Tensor& self);
at::Tensor neg(const at::Tensor& self);
at::Tensor rsqrt(const at::Tensor& self);
at::Tensor sqrt(const at::Tensor& self);
at::Tensor sigmoid(const at::Tensor& self);
at::Tensor tanh(const at::Tensor& self);
at::Tensor silu(const at::Tensor& self);
at::Tensor sigmoid_backward(const at::Tensor& grad_output, const at::Tensor& output);
at::Tensor tanh_backward(const at::Tensor& grad_output, const at::Tensor& output);
at::Tensor silu_backward(const at::Tensor& grad_output, const at::Tensor& self);
at::Tensor gelu(const at::Tensor& self, c10::string_view approximate);
at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& self,
                         c10::string_view approximate);
at::Tensor threshold_backward(const at::Tensor& grad_output, const at::Tensor& self,
                              const at::Scalar& threshold);
at::Tensor pow_tensor_scalar(const at::Tensor& self, const at::Scalar& exponent);
at::Tensor relu(const at::Tensor& self);
at::Tensor& relu_(at::Tensor& self);
at::Tensor& zero_(at::Tensor& self);

// Blas.cpp
at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2);
at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2);
at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                 const at::Scalar& beta, const at::Scalar& alpha);
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                   const at::Scalar& beta, const at::Scalar& alpha);

// Reduction.cpp
at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                   std::optional<at::ScalarType> dtype);
at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype);
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float);
at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float);
at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype);
at::Tensor log_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                int64_t dim, at::ScalarType input_dtype);

// Nn.cpp
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask);
std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight,
                                                    int64_t reduction, int64_t ignore_index);
at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Tensor& target, const std::optional<at::Tensor>& weight,
                             int64_t reduction, int64_t ignore_index, const at::Tensor& total_weight);
at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq);
at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index);
at::Tensor where(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other);

}  // namespace openreg::kernels
