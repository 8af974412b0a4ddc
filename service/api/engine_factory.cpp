#include "service/api/engine_factory.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/runner/device_runner.h"
#include "engine/runner/runner.h"
#include "scheduler/engine_loop.h"
#include "scheduler/placement.h"
#include "service/api/fake_engine.h"

namespace vv::api {

EngineHandle::~EngineHandle() {
  engine.reset();  // the loop borrows the runner and the tokenizer
  runner.reset();
  runners.clear();
}

Result<std::vector<TokenId>> load_script(const Tokenizer& tokenizer, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("VIBEVOICE_TEST_SCRIPT: cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  VV_ASSIGN_OR_RETURN(std::vector<TokenId> ids, tokenizer.encode(ss.str(), /*parse_special=*/false));
  ids.push_back(kImEndId);
  return ids;
}

Result<ComputeChoice> choose_compute(const config::Settings& s,
                                     const std::map<std::string, int>& checkpoint_dtypes) {
  ComputeChoice c;
  VV_ASSIGN_OR_RETURN(std::vector<std::string> devices, parse_device_list(s.s("model.device")));
  if (!devices.empty()) {
    VV_ASSIGN_OR_RETURN(DeviceSpec d, parse_device(devices.front()));
    c.gpu = d.kind == DeviceSpec::Kind::kCuda;
  }
  const std::string want = s.s("model.dtype");
  if (!c.gpu) {
    c.dtype = "float32";
    return c;
  }
  if (want != "auto") {
    c.dtype = want;
  } else {
    // The matrices' dtype: the most common among the checkpoint's tensors (norms may be f32).
    std::string top;
    int most = -1;
    for (const auto& [name, n] : checkpoint_dtypes) {
      if (n > most) {
        most = n;
        top = name;
      }
    }
    c.dtype = top == "BF16" ? "bfloat16" : top == "F16" ? "float16" : "float32";
  }
  c.gpu_bf16 = c.dtype != "float32";
  return c;
}

Result<std::shared_ptr<EngineHandle>> make_engine(AppState& state, std::shared_ptr<const Tokenizer> tokenizer,
                                                  const std::function<void(double)>& progress) {
  auto h = std::make_shared<EngineHandle>();
  h->tokenizer = std::move(tokenizer);
  const auto& s = state.settings;
  VV_ASSIGN_OR_RETURN(h->checkpoint, Checkpoint::open(s.s("model.path")));
  progress(0.3);
  const ModelSpec& spec = h->checkpoint->spec();
  h->prepare.sample_rate = spec.sample_rate;
  h->prepare.normalize = spec.normalize_audio;
  h->prepare.target_dbfs = spec.target_dbfs;
  h->prepare.eps = spec.norm_eps;
  h->prepare.hop = spec.acoustic.hop();
  if (!state.hooks.script_file.empty()) {
    VV_ASSIGN_OR_RETURN(state.script_ids, load_script(*h->tokenizer, state.hooks.script_file));
  }
  if (state.hooks.fake_engine) {
    FakeEngineOptions fo;
    fo.max_running = s.i("engine.max_running_requests");
    fo.max_waiting = s.i("engine.max_waiting_requests");
    fo.hooks = state.hooks;
    h->engine = std::make_shared<FakeEngine>(*h->tokenizer, fo);
    progress(1.0);
    return h;
  }
  VV_ASSIGN_OR_RETURN(const ComputeChoice compute, choose_compute(s, h->checkpoint->dtype_counts()));
  h->dtype = compute.dtype;
  BackendOptions backend;
  backend.gpu_bf16_gemm = compute.gpu_bf16;
  backend.deterministic = s.b("engine.deterministic");
  RunnerOptions ro;
  ro.block_size = static_cast<int>(s.i("engine.kv_page_tokens"));
  // engine.max_step_tokens: the rows one step may hold (prefill chunks + one decode row per running
  // request); the workspaces are sized for it.
  ro.max_rows = static_cast<int>(s.i("engine.max_step_tokens"));
  // Encoder launches (MODEL.md §5.7: any multiple of the hop segments exactly): one request's
  // segment and the packed launch; the workspace holds the larger (≈ 512 B per sample past 60 s).
  const std::int64_t hop = spec.acoustic.hop();
  const auto samples = [&](const char* key) {
    return static_cast<std::int64_t>(s.f(key) * spec.sample_rate) / hop * hop;
  };
  const std::int64_t encode_segment = std::max<std::int64_t>(samples("engine.encoder_segment_s"), hop);
  const std::int64_t encode_pack = samples("engine.encoder_pack_s");
  if (encode_pack > spec.chunk_size) ro.encoder_pack_samples = encode_pack;
  ro.max_seqs = static_cast<int>(s.i("engine.max_running_requests"));
  // The KV pool holds one full-context request (prefix sharing and preemption stretch it further).
  ro.kv_positions = s.i("model.max_model_len");
  ro.consume_weights = true;
  ro.kv_dtype_follows_compute = true;  // bf16 k/v when the GPU computes in bf16
  const std::string device = s.s("model.device");
  // Placement: a memory cap per device (engine.gpu_memory, else engine.gpu_memory_fraction of each
  // GPU), streamed layers, and replicas or layer shards over a device list.
  PlacementOptions place;
  place.memory = s.s("engine.gpu_memory");
  if (place.memory.empty()) {
    char share[32];
    std::snprintf(share, sizeof share, "%.4g%%", 100.0 * s.f("engine.gpu_memory_fraction"));
    place.memory = share;
  }
  place.gpu_layers = static_cast<int>(s.i("engine.gpu_layers"));
  VV_ASSIGN_OR_RETURN(place.split, parse_split_mode(s.s("engine.split_mode")));
  VV_ASSIGN_OR_RETURN(auto runners, make_runners(*h->checkpoint, ro, device, backend, place));
  for (auto& r : runners) h->runners.push_back(std::shared_ptr<Runner>(std::move(r)));
  h->runner = h->runners.front();
  progress(0.9);
  EngineLoopOptions eo;
  // GPU backends: the encoder's standard launch shapes are made once before the server reports
  // ready (cuBLASLt plans and workspaces), not on the first requests' time to first token.
  eo.warmup = h->runner->backend().name().rfind("cuda", 0) == 0;
  eo.encode_segment = encode_segment;
  eo.encode_pack_samples = encode_pack;
  eo.max_running = static_cast<int>(s.i("engine.max_running_requests"));
  eo.max_waiting = static_cast<int>(s.i("engine.max_waiting_requests"));
  eo.output_threads = static_cast<int>(s.i("engine.sampling_threads"));
  eo.pause_file = state.hooks.pause_file;
  eo.fault_after_tokens = state.hooks.fault_after_tokens > 0 ? static_cast<int>(state.hooks.fault_after_tokens) : 0;
  metrics::ServiceMetrics* m = &state.metrics;
  AppState* st = &state;
  const auto delay = std::chrono::milliseconds(state.hooks.token_delay_ms);
  eo.on_step = [m, st, delay](const StepReport& r) {
    st->note_engine_event();
    // VIBEVOICE_TEST_TOKEN_DELAY_MS: a step takes at least this long (on the engine thread).
    if (delay.count() > 0 && r.seconds * 1000 < static_cast<double>(delay.count())) {
      std::this_thread::sleep_for(delay - std::chrono::milliseconds(static_cast<std::int64_t>(r.seconds * 1000)));
    }
    const char* phase = r.prefill_rows > 0 && r.decode_rows > 0 ? "mixed" : r.prefill_rows > 0 ? "prefill" : "decode";
    m->engine_steps->Add({{"phase", phase}}).Increment();
    m->engine_step_duration->Add({{"phase", phase}}, metrics::ServiceMetrics::inter_token_buckets()).Observe(r.seconds);
    m->engine_batch_size->Observe(static_cast<double>(r.seqs));
    m->engine_batch_tokens->Observe(static_cast<double>(r.rows));
    if (r.gap_seconds > 0) m->engine_host_gap->Observe(r.gap_seconds);
  };
  eo.progress = [st](const TranscriptionProgress& p) {
    if (p.phase == TranscriptionProgress::Phase::kDecoding) st->progress_tokens(p.request, p.done);
  };
  if (h->runners.size() == 1) {
    VV_ASSIGN_OR_RETURN(std::unique_ptr<EngineLoop> loop, EngineLoop::create(*h->runner, *h->tokenizer, std::move(eo)));
    h->engine = std::shared_ptr<EngineLoop>(std::move(loop));
  } else {
    // Replicas: one loop per device behind one client. A replica's progress carries its own
    // request ids, not the client's: live token counts are left to the terminal events.
    eo.progress = nullptr;
    std::vector<std::unique_ptr<EngineLoop>> loops;
    for (const auto& r : h->runners) {
      VV_ASSIGN_OR_RETURN(std::unique_ptr<EngineLoop> loop, EngineLoop::create(*r, *h->tokenizer, eo));
      loops.push_back(std::move(loop));
    }
    VV_ASSIGN_OR_RETURN(std::unique_ptr<ReplicatedEngine> rep, ReplicatedEngine::create(std::move(loops)));
    h->engine = std::shared_ptr<ReplicatedEngine>(std::move(rep));
  }
  // The loop reports ready once its thread runs; requests before that are refused.
  while (!h->engine->load().ready) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  progress(1.0);
  return h;
}

Status warm_up(EngineHandle& h) {
  auto silence = audio::prepare_decoded(audio::DecodedAudio{std::vector<float>(24000, 0.0f), 24000, 1}, h.prepare);
  if (!silence.is_ok()) return silence.status();
  Request r;
  r.kind = Request::Kind::kTranscription;
  r.audio.push_back(std::move(silence).value());
  r.sampling.max_new_tokens = 8;
  r.request_id = "warmup";
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status result;
  auto id = h.engine->submit(std::move(r), [&](RequestEvent&& ev) {
    if (!ev.terminal()) return;
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    if (ev.type == RequestEvent::Type::kError) result = ev.error;
    cv.notify_all();
  });
  if (!id.is_ok()) return id.status();
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return result;
}

}  // namespace vv::api
