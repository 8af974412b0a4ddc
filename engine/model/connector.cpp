#include "engine/model/connector.h"

#include <algorithm>

namespace vv {

Result<SpeechConnector::Branch> SpeechConnector::load_branch(Backend& be, const ConnectorWeights& w, int hidden,
                                                             int in_dim) {
  VV_RETURN_IF_ERROR(expect_shape(w.fc1_w, {hidden, in_dim}));
  VV_RETURN_IF_ERROR(expect_shape(w.fc1_b, {hidden}));
  VV_RETURN_IF_ERROR(expect_shape(w.norm, {hidden}));
  VV_RETURN_IF_ERROR(expect_shape(w.fc2_w, {hidden, hidden}));
  VV_RETURN_IF_ERROR(expect_shape(w.fc2_b, {hidden}));
  Branch b;
  VV_ASSIGN_OR_RETURN(b.fc1_w, upload_matrix(be, w.fc1_w));
  VV_ASSIGN_OR_RETURN(b.fc1_b, upload_f32(be, w.fc1_b));
  VV_ASSIGN_OR_RETURN(b.norm, upload_f32(be, w.norm));
  VV_ASSIGN_OR_RETURN(b.fc2_w, upload_matrix(be, w.fc2_w));
  VV_ASSIGN_OR_RETURN(b.fc2_b, upload_f32(be, w.fc2_b));
  return b;
}

Result<std::unique_ptr<SpeechConnector>> SpeechConnector::create(Backend& be, const ConnectorWeights& acoustic,
                                                                 const ConnectorWeights& semantic, int hidden,
                                                                 int acoustic_dim, int semantic_dim,
                                                                 int64_t max_rows) {
  std::unique_ptr<SpeechConnector> c(new SpeechConnector(be));
  c->hidden_ = hidden;
  c->max_rows_ = std::max<int64_t>(1, max_rows);
  VV_ASSIGN_OR_RETURN(c->acoustic_, load_branch(be, acoustic, hidden, acoustic_dim));
  VV_ASSIGN_OR_RETURN(c->semantic_, load_branch(be, semantic, hidden, semantic_dim));
  c->h_ = alloc_f32(be, c->max_rows_, hidden);
  return c;
}

void SpeechConnector::run_branch(const Branch& b, const Tensor& in, Tensor& out, Epilogue ep) {
  Tensor h = h_.t.row_slice(0, in.rows());
  be_.gemm(in, b.fc1_w.t, &b.fc1_b.t, h, Epilogue::kNone);
  be_.rms_norm(h, b.norm.t, kNormEps, h);
  be_.gemm(h, b.fc2_w.t, &b.fc2_b.t, out, ep);
}

Status SpeechConnector::run(const Tensor& acoustic, const Tensor& semantic, Tensor& out) {
  const int64_t f = acoustic.rows();
  if (semantic.rows() != f || out.rows() != f || out.cols() != hidden_) {
    return invalid_argument("speech connector: acoustic rows " + std::to_string(f) + ", semantic rows " +
                            std::to_string(semantic.rows()) + ", output [" + std::to_string(out.rows()) + ", " +
                            std::to_string(out.cols()) + "] must agree (hidden " + std::to_string(hidden_) + ")");
  }
  if (acoustic.cols() != acoustic_.fc1_w.t.cols() || semantic.cols() != semantic_.fc1_w.t.cols()) {
    return invalid_argument("speech connector: latent widths " + std::to_string(acoustic.cols()) + "/" +
                            std::to_string(semantic.cols()) + " do not match the connector weights");
  }
  for (int64_t r0 = 0; r0 < f; r0 += max_rows_) {
    const int64_t n = std::min(max_rows_, f - r0);
    Tensor o = out.row_slice(r0, n);
    run_branch(acoustic_, acoustic.row_slice(r0, n), o, Epilogue::kNone);
    run_branch(semantic_, semantic.row_slice(r0, n), o, Epilogue::kAddResidual);
  }
  return Status::ok();
}

}  // namespace vv
