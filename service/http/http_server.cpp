#include "service/http/http_server.h"

#include <sys/socket.h>

#include <chrono>
#include <deque>
#include <functional>
#include <list>
#include <optional>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "engine/transcript/json_text.h"
#include "service/api/service_log.h"
#include "service/http/multipart_parser.h"
#include "service/http/ascii_text.h"
#include "service/http/websocket_connection.h"

namespace vv::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;
using SteadyClock = std::chrono::steady_clock;

namespace {

std::chrono::steady_clock::duration secs(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

api::ApiError plain_error(int status, std::string code, std::string message, bool close) {
  api::ApiError e;
  e.status = status;
  e.code = std::move(code);
  e.message = std::move(message);
  e.close = close;
  return e;
}

}  // namespace

// One connection. Everything runs on the session's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer& server, tcp::socket socket)
      : server_(server),
        registry_(server.registry()),
        limits_(server.limits()),
        strand_(asio::make_strand(server.io())),
        socket_(std::move(socket)),
        timer_(strand_),
        sse_timer_(strand_) {
    // The socket's own executor is the io_context; every completion is bound to the strand.
  }

  void start() {
    asio::dispatch(strand_, [self = shared_from_this()] { self->wait_request(true); });
  }

  void close_if_idle() {
    asio::post(strand_, [self = shared_from_this()] {
      if (self->phase_ == Phase::kIdle) self->close();
      if (self->phase_ == Phase::kUpgraded) {
        if (auto ws = self->ws_.lock()) ws->drain();
      }
    });
  }

  void refuse_over_capacity() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      api::ApiError e = plain_error(503, "too_many_connections", "Too many open connections; retry later.", true);
      e.retry_after_s = 1;
      HttpResponse r = api::error_response(e);
      r.set("x-request-id", api::Api::request_id_for(HttpRequestHead{}));
      self->server_.api().state().metrics.rejected->Add({{"reason", "too_many_connections"}}).Increment();
      self->phase_ = Phase::kClosing;
      self->send_raw(serialize_head(r, r.body.size(), false) + r.body, true);
    });
  }

  // --- the Exchange side (called through SessionExchange, on the strand) ---
  void ex_after(std::uint64_t gen, double seconds, std::function<void()> fn) {
    if (gen != gen_) return;
    auto t = std::make_shared<asio::steady_timer>(strand_);
    t->expires_after(secs(seconds));
    timers_.push_back(t);
    t->async_wait([self = shared_from_this(), gen, t, fn = std::move(fn)](beast::error_code ec) {
      if (ec || gen != self->gen_) return;
      fn();
    });
  }
  void ex_respond(std::uint64_t gen, HttpResponse r) {
    if (gen != gen_ || responded_) return;
    responded_ = true;
    finish_response(std::move(r));
  }
  void ex_begin_stream(std::uint64_t gen, HttpResponse head) {
    if (gen != gen_ || responded_) return;
    responded_ = true;
    streaming_ = true;
    status_ = head.status;
    decorate(head);
    send(serialize_head(head, std::nullopt, false));
    arm_sse_keepalive();
  }
  void ex_write(std::uint64_t gen, std::string data) {
    if (gen != gen_ || !streaming_ || disconnected_) return;
    send(chunk(data));
  }
  void ex_end_stream(std::uint64_t gen) {
    if (gen != gen_ || !streaming_) return;
    streaming_ = false;
    sse_timer_.cancel();
    account();
    send(chunk(""));
    end_exchange(close_after_);
  }
  void ex_on_disconnect(std::uint64_t gen, std::function<void()> fn) {
    if (gen != gen_) return;
    if (disconnected_) {
      fn();
      return;
    }
    on_disconnect_ = std::move(fn);
  }
  bool ex_disconnected(std::uint64_t gen) const { return gen != gen_ || disconnected_; }
  Strand& strand() { return strand_; }

 private:
  enum class Phase { kIdle, kHeader, kBody, kDiscard, kProcessing, kClosing, kClosed, kUpgraded };

  void wait_request(bool first) {
    phase_ = Phase::kIdle;
    if (server_.api().state().refusing.load() && !first) {
      close();
      return;
    }
    if (buffer_.size() > 0) {
      read_header();
      return;
    }
    // An idle connection gives back the body-sized read buffer (5,000 idle keep-alive connections
    // must stay small); the next upload reserves it again.
    if (buffer_.capacity() > kHeaderReadBytes) buffer_.shrink_to_fit();
    const double idle = first ? limits_.header_timeout_s : limits_.keepalive_timeout_s;
    if (!first && idle <= 0) {
      close();
      return;
    }
    arm_timer(idle);
    socket_.async_wait(tcp::socket::wait_read,
                       asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec) {
                         if (self->phase_ != Phase::kIdle) return;
                         if (ec || self->timed_out_) {
                           self->close();
                           return;
                         }
                         self->read_header();
                       }));
  }

  void arm_timer(double seconds) {
    timed_out_ = false;
    timer_.expires_after(secs(seconds));
    timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->socket_.cancel(ignored);
    }));
  }

  void read_header() {
    phase_ = Phase::kHeader;
    arm_timer(limits_.header_timeout_s);
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes + limits_.max_uri_bytes + 1024));
    parser_->body_limit(boost::none);
    bhttp::async_read_header(socket_, buffer_, *parser_,
                             asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                               self->on_header(ec);
                             }));
  }

  void refuse_now(const api::ApiError& e) {
    // A protocol-level refusal: answer and close.
    HttpResponse r = api::error_response(e);
    r.close = true;
    // Bytes the client may still be writing are read and dropped for a while, so that it sees this
    // answer instead of a reset.
    lingering_ = true;
    head_ = HttpRequestHead{};
    info_.reset();
    request_id_ = api::Api::request_id_for(head_);
    route_label_ = "other";
    method_label_ = "other";
    ++gen_;
    responded_ = true;
    start_ = SteadyClock::now();
    finish_response(std::move(r));
  }

  void on_header(beast::error_code ec) {
    timer_.cancel();
    if (ec) {
      if (timed_out_) {
        if (buffer_.size() > 0) {
          refuse_now(plain_error(408, "request_timeout", "The request header did not arrive in time.", true));
        } else {
          close();
        }
        return;
      }
      if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
          ec == asio::error::operation_aborted) {
        close();
        return;
      }
      if (ec == bhttp::error::header_limit) {
        const auto data = std::string_view(static_cast<const char*>(buffer_.data().data()), buffer_.size());
        const auto eol = data.find("\r\n");
        const bool uri = eol == std::string_view::npos ? data.size() > limits_.max_uri_bytes : eol > limits_.max_uri_bytes;
        if (uri) {
          refuse_now(plain_error(414, "uri_too_long", "The request target is too long.", true));
        } else {
          refuse_now(plain_error(431, "headers_too_large", "The request header block is too large.", true));
        }
        return;
      }
      refuse_now(plain_error(400, "bad_http_request", "Malformed HTTP request: " + ec.message() + ".", true));
      return;
    }
    auto& req = parser_->get();
    head_ = HttpRequestHead{};
    head_.method = std::string(req.method_string());
    head_.target = std::string(req.target());
    std::size_t header_bytes = 0;
    bool has_cl = false, has_te = false;
    for (const auto& f : req) {
      const std::string name = lower(f.name_string());
      header_bytes += f.name_string().size() + f.value().size() + 4;
      if (name == "content-length") has_cl = true;
      if (name == "transfer-encoding") has_te = true;
      head_.headers.emplace_back(name, std::string(f.value()));
    }
    if (head_.target.size() > limits_.max_uri_bytes) {
      refuse_now(plain_error(414, "uri_too_long", "The request target is too long.", true));
      return;
    }
    if (header_bytes > limits_.max_header_bytes) {
      refuse_now(plain_error(431, "headers_too_large", "The request header block is too large.", true));
      return;
    }
    if (has_cl && has_te) {
      refuse_now(plain_error(400, "bad_http_request",
                             "Malformed HTTP request: both Content-Length and Transfer-Encoding.", true));
      return;
    }
    if (req.version() < 11 && !req.keep_alive()) close_after_ = true;
    head_.keep_alive = req.keep_alive();
    head_.chunked = parser_->chunked();
    if (auto cl = parser_->content_length()) head_.content_length = *cl;
    if (auto ex = head_.header("expect")) head_.expect_continue = lower(*ex) == "100-continue";
    close_after_ = !head_.keep_alive;

    ++gen_;
    status_ = 0;
    responded_ = false;
    disconnected_ = false;
    streaming_ = false;
    on_disconnect_ = nullptr;
    timers_.clear();
    body_bytes_ = 0;
    start_ = SteadyClock::now();
    server_.active_requests_.fetch_add(1);
    counted_ = true;

    api::Precheck pre = server_.api().precheck(head_);
    info_ = pre.info;
    request_id_ = info_->request_id;
    route_label_ = info_->route_label;
    method_label_ = metrics::ServiceMetrics::method_label(head_.method);
    server_.api().state().metrics.http_in_flight->Add({{"route", route_label_}}).Increment();
    in_flight_counted_ = true;
    if (pre.realtime) {
      upgrade(std::move(pre.realtime));
      return;
    }
    const bool has_body = head_.chunked || (head_.content_length && *head_.content_length > 0);
    if (pre.response) {
      HttpResponse r = std::move(*pre.response);
      if (head_.method == "HEAD") head_request_ = true;
      if (!has_body || parser_->is_done()) {
        responded_ = true;
        finish_response(std::move(r));
        return;
      }
      // §2.5: a refusal decided from the head. With Expect: 100-continue the body never comes.
      if (head_.expect_continue) {
        r.close = true;
        responded_ = true;
        finish_response(std::move(r));
        return;
      }
      const bool small = head_.content_length && *head_.content_length <= limits_.discard_body_bytes && !r.close;
      if (small) {
        pending_refusal_ = std::move(r);
        discard_body();
        return;
      }
      r.close = true;
      lingering_ = true;
      responded_ = true;
      finish_response(std::move(r));
      return;
    }
    head_request_ = head_.method == "HEAD";
    body_limit_ = pre.body_limit;
    parser_->body_limit(body_limit_);
    if (pre.body == api::Precheck::Body::kMultipart) {
      MultipartLimits ml;
      ml.max_parts = limits_.max_multipart_parts;
      ml.max_field_bytes = limits_.max_form_field_bytes;
      multipart_.emplace(pre.boundary, ml);
    } else {
      multipart_.reset();
    }
    json_.clear();
    if (head_.expect_continue && has_body) send("HTTP/1.1 100 Continue\r\n\r\n");
    body_started_ = SteadyClock::now();
    read_body();
  }

  // GET /v1/realtime passed §10.2: the connection becomes a WebSocket (the 101 is Beast's, with
  // our headers). The request is handed over as received, with any bytes read past its head.
  void upgrade(std::shared_ptr<api::RealtimeHandshake> hs) {
    auto& req = parser_->get();
    std::string raw = std::string(req.method_string()) + " " + std::string(req.target()) + " HTTP/1.1\r\n";
    for (const auto& f : req) {
      raw.append(f.name_string().data(), f.name_string().size());
      raw += ": ";
      raw.append(f.value().data(), f.value().size());
      raw += "\r\n";
    }
    raw += "\r\n";
    raw.append(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(buffer_.size());
    parser_.reset();
    status_ = 101;
    record();
    phase_ = Phase::kUpgraded;
    ++gen_;
    timer_.cancel();
    sse_timer_.cancel();
    const auto& s = server_.api().state().settings;
    WebSocketOptions o;
    o.max_message_bytes = static_cast<std::size_t>(s.i("realtime.max_message_bytes"));
    o.send_queue_bytes = static_cast<std::size_t>(s.i("realtime.send_queue_bytes"));
    o.ping_interval_s = s.f("realtime.ping_interval_s");
    o.handshake_timeout_s = limits_.header_timeout_s;
    o.server_header = limits_.server_header;
    auto ws = std::make_shared<WebSocketConnection>(server_.api(), std::move(socket_), o, std::move(hs),
                                                    shared_from_this());
    ws_ = ws;
    ws->start(std::move(raw));
  }

  void discard_body() {
    phase_ = Phase::kDiscard;
    arm_timer(limits_.body_idle_timeout_s);
    parser_->body_limit(boost::none);
    parser_->get().body().data = body_buf_;
    parser_->get().body().size = sizeof body_buf_;
    bhttp::async_read(socket_, buffer_, *parser_,
                      asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->timer_.cancel();
                        if (ec == bhttp::error::need_buffer) ec = {};
                        if (ec) {
                          HttpResponse r = std::move(*self->pending_refusal_);
                          r.close = true;
                          self->responded_ = true;
                          self->finish_response(std::move(r));
                          return;
                        }
                        if (!self->parser_->is_done()) {
                          self->discard_body();
                          return;
                        }
                        self->responded_ = true;
                        self->finish_response(std::move(*self->pending_refusal_));
                      }));
  }

  void read_body() {
    phase_ = Phase::kBody;
    if (parser_->is_done()) {
      on_body_done();
      return;
    }
    const double elapsed = std::chrono::duration<double>(SteadyClock::now() - body_started_).count();
    if (elapsed > limits_.body_timeout_s) {
      body_fail(plain_error(408, "request_timeout", "The request body took too long to arrive.", true));
      return;
    }
    arm_timer(std::min(limits_.body_idle_timeout_s, limits_.body_timeout_s - elapsed));
    // Beast receives max(512, free capacity) bytes at a time: at the header's capacity a 64 KB
    // upload took ~128 receives, each a trip through the composed read and the strand.
    if (buffer_.capacity() < sizeof body_buf_) buffer_.reserve(sizeof body_buf_);
    parser_->get().body().data = body_buf_;
    parser_->get().body().size = sizeof body_buf_;
    bhttp::async_read(socket_, buffer_, *parser_,
                      asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->on_body_bytes(ec);
                      }));
  }

  void on_body_bytes(beast::error_code ec) {
    timer_.cancel();
    const std::size_t n = sizeof body_buf_ - parser_->get().body().size;
    if (ec == bhttp::error::need_buffer) ec = {};
    if (n > 0) {
      body_bytes_ += n;
      std::string_view chunk_view(body_buf_, n);
      if (multipart_) {
        if (!multipart_->feed(chunk_view)) {
          const auto& me = *multipart_->error();
          api::ApiError e = plain_error(400, me.code, me.message, true);
          e.param = me.param;
          body_fail(e);
          return;
        }
      } else {
        json_.append(chunk_view);
      }
    }
    if (ec) {
      if (timed_out_) {
        body_fail(plain_error(408, "request_timeout", "The request body stalled.", true));
      } else if (ec == bhttp::error::body_limit) {
        body_fail(plain_error(413, "request_too_large",
                              "The request body exceeds the limit of " + std::to_string(body_limit_) + " bytes.", true));
      } else if (ec == bhttp::error::partial_message || ec == asio::error::eof || ec == bhttp::error::end_of_stream) {
        if (multipart_) {
          body_fail(plain_error(400, "invalid_multipart", "The multipart body is truncated.", true));
        } else {
          body_fail(plain_error(400, "invalid_json", "The request body is truncated.", true));
        }
      } else if (ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
        close();
      } else {
        body_fail(plain_error(400, "bad_http_request", "Malformed HTTP body: " + ec.message() + ".", true));
      }
      return;
    }
    read_body();
  }

  void body_fail(const api::ApiError& e) {
    if (info_ && !info_->endpoint.empty()) {
      server_.api().state().metrics.errors->Add({{"endpoint", info_->endpoint}, {"code", e.code}}).Increment();
    }
    HttpResponse r = api::error_response(e);
    r.close = true;
    lingering_ = e.status == 413 || e.status == 400;
    responded_ = true;
    finish_response(std::move(r));
  }

  void on_body_done() {
    std::vector<FormPart> parts;
    if (multipart_) {
      if (!multipart_->finish()) {
        const auto& me = *multipart_->error();
        api::ApiError e = plain_error(400, me.code, me.message, false);
        e.param = me.param;
        responded_ = true;
        finish_response(server_.api().fail(info_.get(), e));
        return;
      }
      parts = std::move(multipart_->parts());
      multipart_.reset();
    }
    server_.api()
        .state()
        .metrics.http_request_size
        ->Add({{"route", route_label_}},
              prometheus::Histogram::BucketBoundaries{1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
                                                      67108864, 268435456, 1073741824})
        .Observe(static_cast<double>(body_bytes_));
    phase_ = Phase::kProcessing;
    watch_disconnect();
    server_.api().handle(info_, std::move(parts), std::move(json_), make_exchange());
  }

  // The client going away is noticed while the request is processed, not only when writing.
  void watch_disconnect() {
    const std::uint64_t gen = gen_;
    socket_.async_wait(tcp::socket::wait_read,
                       asio::bind_executor(strand_, [self = shared_from_this(), gen](beast::error_code ec) {
                         if (gen != self->gen_ || self->phase_ != Phase::kProcessing) return;
                         if (ec == asio::error::operation_aborted) return;
                         char c;
                         const ssize_t n = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
                         if (ec || n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                           self->mark_disconnected();
                         } else if (n < 0) {
                           self->watch_disconnect();  // woken with nothing to read: watch again
                         }
                         // n > 0: a pipelined request; it is read after this response.
                       }));
  }

  void mark_disconnected() {
    if (disconnected_) return;
    disconnected_ = true;
    close_after_ = true;
    if (on_disconnect_) {
      auto fn = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      fn();
    }
    if (phase_ == Phase::kProcessing && !writing_) {
      // Nothing more will be written: end the exchange now.
      end_exchange(true);
    }
  }

  std::shared_ptr<api::Exchange> make_exchange();

  void decorate(HttpResponse& r) {
    r.headers.insert(r.headers.begin(), {"x-request-id", request_id_});
    r.headers.insert(r.headers.begin(), {"Server", limits_.server_header});
    if (info_) {
      for (const auto& h : info_->response_headers) r.headers.push_back(h);
    }
    if (close_after_) r.close = true;
    if (server_.api().state().refusing.load()) r.close = true;
  }

  void finish_response(HttpResponse r) {
    status_ = r.status;
    decorate(r);
    if (r.close) close_after_ = true;
    std::string out = serialize_head(r, r.body.size(), head_request_);
    if (!head_request_) out += r.body;
    account();
    send(std::move(out));
    end_exchange(close_after_);
  }

  // The exchange's metrics and access log, before its last bytes are handed to the socket: a client
  // that reads the response and then scrapes /metrics finds the request counted.
  void account() {
    end_ = SteadyClock::now();
    record();
    accounted_ = true;
  }

  void end_exchange(bool close_after) {
    // The response's last byte has just been handed to the socket (a small response is written
    // there and then): that ends the request's duration, not the bookkeeping below.
    if (!accounted_) end_ = SteadyClock::now();
    sse_timer_.cancel();
    for (auto& t : timers_) t->cancel();
    timers_.clear();
    on_disconnect_ = nullptr;
    ++gen_;  // stale exchange calls are ignored from here
    if (!accounted_) record();
    accounted_ = false;
    if (close_after) {
      phase_ = Phase::kClosing;
      closing_after_write_ = true;
      if (!writing_) shutdown_after_write();
    } else {
      phase_ = Phase::kIdle;
      pending_next_ = true;
      if (!writing_) start_next();
    }
  }

  void start_next() {
    pending_next_ = false;
    head_request_ = false;
    info_.reset();
    wait_request(false);
  }

  void record() {
    if (!counted_) {
      // A protocol-level refusal before a request was counted.
      auto& m = server_.api().state().metrics;
      m.http_requests->Add({{"route", route_label_}, {"method", method_label_}, {"status", std::to_string(status_)}})
          .Increment();
      log_access();
      return;
    }
    counted_ = false;
    server_.active_requests_.fetch_sub(1);
    auto& m = server_.api().state().metrics;
    m.http_requests->Add({{"route", route_label_}, {"method", method_label_}, {"status", std::to_string(status_)}})
        .Increment();
    m.http_request_duration
        ->Add({{"route", route_label_}, {"method", method_label_}},
              metrics::ServiceMetrics::duration_buckets())
        .Observe(std::chrono::duration<double>(finished_at() - start_).count());
    if (in_flight_counted_) {
      m.http_in_flight->Add({{"route", route_label_}}).Decrement();
      in_flight_counted_ = false;
    }
    log_access();
  }

  void log_access() {
    if (!limits_.access_log) return;
    const double ms = std::chrono::duration<double, std::milli>(finished_at() - start_).count();
    char dur[32];
    std::snprintf(dur, sizeof dur, "%.3f", ms);
    api::service_log::log("info", "access",
                          {{"request_id", request_id_},
                           {"method", head_.method.substr(0, 16)},
                           {"path", head_.path().substr(0, 256)},
                           {"route", route_label_},
                           {"#status", std::to_string(status_)},
                           {"#duration_ms", dur},
                           {"#bytes_in", std::to_string(body_bytes_)}});
  }

  // When the request ended: its last byte handed to the socket, or now (closed mid-request).
  SteadyClock::time_point finished_at() const { return end_ > start_ ? end_ : SteadyClock::now(); }

  void send(std::string data) {
    if (phase_ == Phase::kClosed) return;
    last_write_ = SteadyClock::now();
    out_.push_back(std::move(data));
    if (!writing_) write_next();
  }

  void send_raw(std::string data, bool close_after) {
    closing_after_write_ = close_after;
    send(std::move(data));
    if (close_after && !writing_) shutdown_after_write();
  }

  void write_next() {
    if (out_.empty()) {
      writing_ = false;
      if (closing_after_write_) {
        shutdown_after_write();
      } else if (pending_next_) {
        start_next();
      }
      return;
    }
    writing_ = true;
    asio::async_write(socket_, asio::buffer(out_.front()),
                      asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->out_.pop_front();
                        if (ec) {
                          self->writing_ = false;
                          self->out_.clear();
                          self->mark_disconnected();
                          self->close();
                          return;
                        }
                        self->write_next();
                      }));
  }

  void arm_sse_keepalive() {
    sse_timer_.expires_after(secs(limits_.sse_keepalive_s));
    const std::uint64_t gen = gen_;
    sse_timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->gen_ || !self->streaming_) return;
      const double idle = std::chrono::duration<double>(SteadyClock::now() - self->last_write_).count();
      if (idle >= self->limits_.sse_keepalive_s * 0.999) self->send(chunk(": keep-alive\n\n"));
      self->arm_sse_keepalive();
    }));
  }

  void shutdown_after_write() {
    beast::error_code ec;
    if (lingering_ && limits_.lingering_close_s > 0) {
      // Half-close, then keep reading (and discarding) for a while so the client sees the response.
      socket_.shutdown(tcp::socket::shutdown_send, ec);
      phase_ = Phase::kClosing;
      arm_timer(limits_.lingering_close_s);
      linger_read();
      return;
    }
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    close();
  }

  void linger_read() {
    socket_.async_read_some(asio::buffer(body_buf_),
                            asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) {
                                self->close();
                                return;
                              }
                              self->linger_read();
                            }));
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    if (counted_) {
      // The connection ended mid-request (client gone): the request is still accounted.
      if (status_ == 0) status_ = 499;
      record();
    }
    phase_ = Phase::kClosed;
    if (on_disconnect_) {
      auto fn = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      disconnected_ = true;
      fn();
    }
    ++gen_;
    beast::error_code ec;
    timer_.cancel();
    sse_timer_.cancel();
    for (auto& t : timers_) t->cancel();
    timers_.clear();
    socket_.close(ec);
  }

 public:
  ~Session() { registry_->closed(); }

 private:
  HttpServer& server_;
  std::shared_ptr<HttpServer::Registry> registry_;
  const ServerLimits& limits_;
  Strand strand_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  asio::steady_timer sse_timer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::buffer_body>> parser_;
  static constexpr std::size_t kHeaderReadBytes = 4096;
  char body_buf_[65536];
  Phase phase_ = Phase::kIdle;
  bool timed_out_ = false;
  HttpRequestHead head_;
  std::shared_ptr<api::RequestInfo> info_;
  std::string request_id_;
  std::string route_label_ = "other";
  std::string method_label_ = "other";
  std::uint64_t gen_ = 0;
  bool responded_ = false;
  bool streaming_ = false;
  bool disconnected_ = false;
  bool close_after_ = false;
  bool head_request_ = false;
  bool counted_ = false;
  bool accounted_ = false;  // account() ran for this exchange (end_exchange does not record it again)
  bool in_flight_counted_ = false;
  bool lingering_ = false;
  bool writing_ = false;
  bool closing_after_write_ = false;
  bool pending_next_ = false;
  int status_ = 0;
  std::uint64_t body_limit_ = 0;
  std::uint64_t body_bytes_ = 0;
  SteadyClock::time_point start_;
  SteadyClock::time_point end_;
  SteadyClock::time_point body_started_;
  SteadyClock::time_point last_write_;
  std::optional<MultipartParser> multipart_;
  std::string json_;
  std::optional<HttpResponse> pending_refusal_;
  std::function<void()> on_disconnect_;
  std::vector<std::shared_ptr<asio::steady_timer>> timers_;
  std::deque<std::string> out_;
  std::weak_ptr<WebSocketConnection> ws_;
};

// The Exchange a handler holds: forwards to its session's strand; calls from an exchange whose
// request has ended (a newer generation) are dropped.
class SessionExchange : public api::Exchange {
 public:
  SessionExchange(std::shared_ptr<Session> s, std::uint64_t gen) : session_(std::move(s)), gen_(gen) {}
  void post(std::function<void()> fn) override { asio::post(session_->strand(), std::move(fn)); }
  void after(double seconds, std::function<void()> fn) override { session_->ex_after(gen_, seconds, std::move(fn)); }
  void respond(HttpResponse r) override { session_->ex_respond(gen_, std::move(r)); }
  void begin_stream(HttpResponse head) override { session_->ex_begin_stream(gen_, std::move(head)); }
  void write(std::string data) override { session_->ex_write(gen_, std::move(data)); }
  void end_stream() override { session_->ex_end_stream(gen_); }
  void on_disconnect(std::function<void()> fn) override { session_->ex_on_disconnect(gen_, std::move(fn)); }
  bool disconnected() const override { return session_->ex_disconnected(gen_); }

 private:
  std::shared_ptr<Session> session_;
  std::uint64_t gen_;
};

std::shared_ptr<api::Exchange> Session::make_exchange() {
  return std::make_shared<SessionExchange>(shared_from_this(), gen_);
}

HttpServer::HttpServer(api::Api& api, ServerLimits limits) : api_(api), limits_(std::move(limits)), acceptor_(io_) {
  registry_->gauge = api_.state().metrics.http_connections;
}

HttpServer::~HttpServer() { stop(); }

Result<std::uint16_t> HttpServer::bind(const std::string& host, std::uint16_t port) {
  beast::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) return invalid_argument("http.host: cannot resolve '" + host + "': " + ec.message());
  const tcp::endpoint ep = results.begin()->endpoint();
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(StatusCode::kInvalidArgument,
                  "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  }
  accept();
  return acceptor_.local_endpoint().port();
}

void HttpServer::accept() {
  acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      accept();
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto s = std::make_shared<Session>(*this, std::move(socket));
    const std::size_t n = registry_->connections.fetch_add(1) + 1;
    registry_->gauge->Set(static_cast<double>(n));
    registry_->opened(s);
    if (n > limits_.max_connections) {
      // A connection whose client has just closed may not be reaped yet: look again shortly
      // before refusing, so the cap counts connections that are really open.
      auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(50));
      t->async_wait([this, s, t](beast::error_code) {
        if (registry_->connections.load() > limits_.max_connections) {
          s->refuse_over_capacity();
        } else {
          s->start();
        }
      });
    } else {
      s->start();
    }
    accept();
  });
}

void HttpServer::Registry::opened(const std::shared_ptr<Session>& s) {
  std::lock_guard<std::mutex> lock(mu);
  sessions.insert(s);
}

void HttpServer::Registry::closed() {
  const std::size_t n = connections.fetch_sub(1) - 1;
  gauge->Set(static_cast<double>(n));
  std::lock_guard<std::mutex> lock(mu);
  // Amortised: sweep expired entries only when the set has grown past twice the live count.
  if (sessions.size() > 2 * n + 64) {
    for (auto it = sessions.begin(); it != sessions.end();) {
      it = it->expired() ? sessions.erase(it) : std::next(it);
    }
  }
}

void HttpServer::close_idle_connections() {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(registry_->mu);
    for (const auto& w : registry_->sessions) {
      if (auto s = w.lock()) live.push_back(s);
    }
  }
  for (auto& s : live) s->close_if_idle();
}

void HttpServer::run(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  asio::post(io_, [this] {
    beast::error_code ec;
    acceptor_.close(ec);
  });
  io_.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace vv::http
