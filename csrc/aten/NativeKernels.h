// Native kernels for the hot operators of a training step (issue 3's list),
// registered for PrivateUse1 in RegisterOpenReg.cpp. Everything else runs
// through the generic fallback (Fallback.cpp).
#pragma once

#include <ATen/core/IListRef.h>
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
at::Tensor cos(const at::Tensor& self);
at::Tensor sin(const at::Tensor& self);
at::Tensor log(const at::Tensor& self);
at::Tensor erf(const at::Tensor& self);
at::Tensor neg(const at::Tensor& self);
at::Tensor reciprocal(const at::Tensor& self);
at::Tensor rsqrt(const at::Tensor& self);
at::Tensor clamp(const at::Tensor& self, const std::optional<at::Scalar>& min,
                 const std::optional<at::Scalar>& max);
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

// Reduction.cpp: reductions and softmax
at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                   std::optional<at::ScalarType> dtype);
at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype);
// Raises the CPU kernels' error for half_to_float=True (Reduction.cpp).
void checkNoHalfToFloat(bool half_to_float);
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float);
at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float);
at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype);
at::Tensor log_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                int64_t dim, at::ScalarType input_dtype);
at::Tensor max(const at::Tensor& self);
std::tuple<at::Tensor, at::Tensor> max_dim(const at::Tensor& self, int64_t dim, bool keepdim);
at::Tensor amax(const at::Tensor& self, at::IntArrayRef dim, bool keepdim);
at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim);
at::Tensor linalg_vector_norm(const at::Tensor& self, const at::Scalar& ord,
                              at::OptionalIntArrayRef dim, bool keepdim,
                              std::optional<at::ScalarType> dtype);

// Concat.cpp: concatenation and splitting copies
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim);
at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out);
std::vector<at::Tensor> split_with_sizes_copy(const at::Tensor& self, c10::SymIntArrayRef split_sizes,
                                              int64_t dim);
void split_with_sizes_copy_out(const at::Tensor& self, c10::SymIntArrayRef split_sizes, int64_t dim,
                               at::TensorList out);
at::Tensor _chunk_cat(at::TensorList tensors, int64_t dim, int64_t num_chunks);
at::Tensor& _chunk_cat_out(at::TensorList tensors, int64_t dim, int64_t num_chunks, at::Tensor& out);

// Foreach.cpp: the _foreach_* ops of the optimizers and clip_grad_norm_, one launch per list
void foreach_add_scalar_(at::TensorList self, const at::Scalar& scalar);
std::vector<at::Tensor> foreach_add_scalar(at::TensorList self, const at::Scalar& scalar);
void foreach_add_list_(at::TensorList self, at::TensorList other, const at::Scalar& alpha);
std::vector<at::Tensor> foreach_add_list(at::TensorList self, at::TensorList other,
                                         const at::Scalar& alpha);
void foreach_add_tensor_(at::TensorList self, const at::Tensor& other, const at::Scalar& alpha);
void foreach_mul_scalar_(at::TensorList self, const at::Scalar& scalar);
std::vector<at::Tensor> foreach_mul_scalar(at::TensorList self, const at::Scalar& scalar);
void foreach_mul_list_(at::TensorList self, at::TensorList other);
void foreach_mul_tensor_(at::TensorList self, const at::Tensor& other);
void foreach_div_scalar_(at::TensorList self, const at::Scalar& scalar);
void foreach_div_scalarlist_(at::TensorList self, at::ArrayRef<at::Scalar> scalars);
void foreach_lerp_scalar_(at::TensorList self, at::TensorList end, const at::Scalar& weight);
void foreach_addcmul_scalar_(at::TensorList self, at::TensorList t1, at::TensorList t2,
                             const at::Scalar& value);
void foreach_addcdiv_scalar_(at::TensorList self, at::TensorList t1, at::TensorList t2,
                             const at::Scalar& value);
void foreach_addcdiv_scalarlist_(at::TensorList self, at::TensorList t1, at::TensorList t2,
                                 at::ArrayRef<at::Scalar> scalars);
void foreach_sqrt_(at::TensorList self);
std::vector<at::Tensor> foreach_sqrt(at::TensorList self);
void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                  at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                  at::TensorList state_steps, double lr, double beta1, double beta2,
                  double weight_decay, double eps, bool amsgrad, bool maximize,
                  const std::optional<at::Tensor>& grad_scale,
                  const std::optional<at::Tensor>& found_inf);
std::vector<at::Tensor> foreach_norm(at::TensorList self, const at::Scalar& ord,
                                     std::optional<at::ScalarType> dtype);

// Attention.cpp: scaled_dot_product_attention takes the CPU's flash kernel
std::tuple<at::Tensor, at::Tensor> sdpa_flash_cpu(const at::Tensor& query, const at::Tensor& key,
                                                  const at::Tensor& value, double dropout_p,
                                                  bool is_causal,
                                                  const std::optional<at::Tensor>& attn_mask,
                                                  std::optional<double> scale);
std::tuple<at::Tensor, at::Tensor, at::Tensor> sdpa_flash_cpu_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& out, const at::Tensor& logsumexp, double dropout_p,
    bool is_causal, const std::optional<at::Tensor>& attn_mask, std::optional<double> scale);

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
