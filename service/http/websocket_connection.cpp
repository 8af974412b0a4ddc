#include "service/http/websocket_connection.h"

#include <array>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <deque>
#include <vector>

#include "service/api/service_log.h"

namespace vv::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = boost::beast::websocket;
using tcp = asio::ip::tcp;

namespace {

std::chrono::steady_clock::duration secs(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// The close code Beast sent when it failed the connection for `ec` (it does so itself, RFC 6455
// §7.1.7); 1006 when the connection just ended.
int failure_close_code(const beast::error_code& ec) {
  if (ec == websocket::error::message_too_big) return 1009;
  if (ec == websocket::error::bad_frame_payload) return 1007;
  if (ec.category() == websocket::make_error_code(websocket::error::closed).category()) return 1002;
  return 1006;
}

}  // namespace

// The connection's socket, a distinct type so that the teardown below is the one Beast uses.
class LingeringSocket : public tcp::socket {
 public:
  explicit LingeringSocket(tcp::socket&& s) : tcp::socket(std::move(s)) {}
};

// Beast's own TCP teardown (1.81) closes after at most one read: a client still sending (the rest
// of an oversized message, frames after a protocol error) then gets a reset that can discard the
// close frame (1009/1002/1007) before it is read. Here the server half-closes, then reads and drops
// what the client still sends until it closes, for at most 2 s and 64 MiB, and only then closes.
// Found by argument-dependent lookup from Beast's close and fail paths.
template <class TeardownHandler>
void async_teardown(beast::role_type role, LingeringSocket& socket, TeardownHandler&& handler) {
  struct Op : std::enable_shared_from_this<Op> {
    Op(LingeringSocket& s, TeardownHandler&& h)
        : sock(s), done_handler(std::forward<TeardownHandler>(h)), timer(s.get_executor()) {}
    LingeringSocket& sock;
    std::decay_t<TeardownHandler> done_handler;
    asio::steady_timer timer;
    std::array<char, 16384> buf{};
    std::size_t drained = 0;
    bool done = false;

    void read() {
      sock.async_read_some(asio::buffer(buf),
                           [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                             self->drained += n;
                             if (ec || self->drained > (64u << 20)) {
                               self->finish();
                             } else {
                               self->read();
                             }
                           });
    }
    void finish() {
      if (done) return;
      done = true;
      timer.cancel();
      beast::error_code ignored;
      sock.close(ignored);
      asio::post(sock.get_executor(), [h = std::move(done_handler)]() mutable { h(beast::error_code{}); });
    }
  };
  auto op = std::make_shared<Op>(socket, std::forward<TeardownHandler>(handler));
  beast::error_code ec;
  if (role == beast::role_type::server) socket.shutdown(tcp::socket::shutdown_send, ec);
  op->timer.expires_after(std::chrono::seconds(2));
  op->timer.async_wait([op](beast::error_code e) {
    if (!e) op->finish();
  });
  op->read();
}

struct WebSocketConnection::Impl {
  Impl(api::Api& a, tcp::socket socket, WebSocketOptions o, std::shared_ptr<api::RealtimeHandshake> h,
       std::shared_ptr<void> k)
      : api(a),
        exec(socket.get_executor()),
        ws(std::move(socket)),
        options(std::move(o)),
        hs(std::move(h)),
        keep(std::move(k)),
        teardown_timer(exec) {}

  api::Api& api;
  tcp::socket::executor_type exec;
  websocket::stream<LingeringSocket> ws;
  WebSocketOptions options;
  std::shared_ptr<api::RealtimeHandshake> hs;
  std::shared_ptr<void> keep;
  std::shared_ptr<Transport> transport;
  std::shared_ptr<api::RealtimeSession> session;
  beast::flat_buffer rbuf;
  std::string request;
  std::deque<std::string> out;
  std::size_t queued_bytes = 0;
  bool writing = false;
  bool open = false;  // handshake done, no close sent or received
  bool close_sent = false;
  int close_code = 0;  // ours, once decided
  std::string close_reason;
  bool close_pending = false;  // close once the queue is flushed
  bool ended = false;
  asio::steady_timer teardown_timer;
  std::vector<std::weak_ptr<asio::steady_timer>> timers;
};

// The RealtimeSession's view of the connection. Holds the connection weakly: the session (owned by
// the connection) and the engine's sinks (which hold this) never keep a closed connection alive.
class WebSocketConnection::Transport : public api::RealtimeTransport {
 public:
  Transport(std::weak_ptr<WebSocketConnection> conn, tcp::socket::executor_type exec)
      : conn_(std::move(conn)), exec_(std::move(exec)) {}

  void post(std::function<void()> fn) override { asio::post(exec_, std::move(fn)); }
  void after(double seconds, std::function<void()> fn) override {
    auto c = conn_.lock();
    if (!c || c->impl_->ended) return;
    auto t = std::make_shared<asio::steady_timer>(exec_);
    t->expires_after(secs(seconds));
    auto& timers = c->impl_->timers;
    if (timers.size() > 64) std::erase_if(timers, [](const auto& w) { return w.expired(); });
    timers.push_back(t);
    t->async_wait([t, fn = std::move(fn)](beast::error_code ec) {
      if (!ec) fn();
    });
  }
  void send_text(std::string json) override {
    if (auto c = conn_.lock()) c->enqueue(std::move(json));
  }
  void close(int code, std::string reason) override {
    if (auto c = conn_.lock()) c->close(code, std::move(reason));
  }
  bool closed() const override {
    auto c = conn_.lock();
    return !c || c->impl_->close_pending || c->impl_->close_sent || c->impl_->ended;
  }

 private:
  std::weak_ptr<WebSocketConnection> conn_;
  tcp::socket::executor_type exec_;
};

WebSocketConnection::WebSocketConnection(api::Api& api, tcp::socket socket, WebSocketOptions options,
                                         std::shared_ptr<api::RealtimeHandshake> handshake,
                                         std::shared_ptr<void> keep)
    : impl_(std::make_unique<Impl>(api, std::move(socket), std::move(options), std::move(handshake),
                                   std::move(keep))) {}

WebSocketConnection::~WebSocketConnection() = default;

void WebSocketConnection::start(std::string request_bytes) {
  auto& m = *impl_;
  m.request = std::move(request_bytes);
  m.ws.read_message_max(m.options.max_message_bytes);
  m.ws.auto_fragment(false);
  websocket::stream_base::timeout t{};
  t.handshake_timeout = secs(m.options.handshake_timeout_s);
  // Beast pings after half the idle time without received data and drops the connection after the
  // whole (§12.4: a ping every ping_interval_s of silence, gone after twice that).
  t.idle_timeout = secs(2 * m.options.ping_interval_s);
  t.keep_alive_pings = true;
  m.ws.set_option(t);
  const std::string server = m.options.server_header;
  const std::string request_id = m.hs->request_id;
  const std::string protocol = m.hs->subprotocol;
  m.ws.set_option(
      websocket::stream_base::decorator([server, request_id, protocol](websocket::response_type& res) {
        res.set(beast::http::field::server, server);
        res.set("x-request-id", request_id);
        if (!protocol.empty()) res.set(beast::http::field::sec_websocket_protocol, protocol);
      }));
  asio::dispatch(m.exec, [self = shared_from_this()] {
    auto& mm = *self->impl_;
    mm.ws.async_accept(asio::buffer(mm.request), [self](beast::error_code ec) { self->on_accept(!ec); });
  });
}

void WebSocketConnection::on_accept(bool ok) {
  auto& m = *impl_;
  m.request.clear();
  m.request.shrink_to_fit();
  if (!ok) {
    finish(1006);
    return;
  }
  m.open = true;
  m.ws.text(true);
  m.transport = std::make_shared<Transport>(weak_from_this(), m.exec);
  m.session = std::make_shared<api::RealtimeSession>(m.api, *m.hs, m.transport);
  api::service_log::log("info", "realtime session opened",
                        {{"session_id", m.session->id()}, {"request_id", m.hs->request_id}});
  // The slots now belong to the session.
  m.hs.reset();
  m.session->start();
  read();
}

void WebSocketConnection::read() {
  auto& m = *impl_;
  m.ws.async_read(m.rbuf, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    auto& mm = *self->impl_;
    if (ec) {
      int code = 1006;
      if (ec == websocket::error::closed) {
        code = mm.close_sent ? mm.close_code : static_cast<int>(mm.ws.reason().code);
        if (code == 0) code = 1005;
      } else if (mm.close_sent) {
        code = mm.close_code;
      } else {
        code = failure_close_code(ec);
      }
      self->finish(code);
      return;
    }
    std::string message = beast::buffers_to_string(mm.rbuf.data());
    mm.rbuf.consume(mm.rbuf.size());
    const bool text = mm.ws.got_text();
    if (mm.session) {
      if (text) {
        mm.session->on_text(message);
      } else {
        mm.session->on_binary(message);
      }
    }
    if (!mm.ended) self->read();
  });
}

void WebSocketConnection::enqueue(std::string text) {
  auto& m = *impl_;
  if (!m.open || m.close_pending || m.close_sent) return;
  m.queued_bytes += text.size();
  m.out.push_back(std::move(text));
  if (m.queued_bytes > m.options.send_queue_bytes) {
    // §12.3: the client is not reading. Its work is cancelled; the close frame goes out past the
    // queue (Beast sends it once the frame being written is done), and the socket is dropped if
    // even that cannot be written.
    m.out.clear();
    m.queued_bytes = 0;
    if (m.session) m.session->on_closed();
    m.close_pending = true;
    m.close_code = 1008;
    m.close_reason = "client too slow";
    m.teardown_timer.expires_after(std::chrono::seconds(5));
    m.teardown_timer.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      beast::error_code ignored;
      beast::get_lowest_layer(self->impl_->ws).close(ignored);
    });
    if (!m.writing) {
      write_next();
      return;
    }
    // Close now rather than behind the stuck write (Beast sends it once that frame is out).
    m.close_sent = true;
    m.ws.async_close(
        websocket::close_reason(static_cast<websocket::close_code>(m.close_code), m.close_reason),
        [self = shared_from_this()](beast::error_code) {});
    return;
  }
  if (!m.writing) write_next();
}

void WebSocketConnection::write_next() {
  auto& m = *impl_;
  if (m.out.empty()) {
    m.writing = false;
    if (m.close_pending && !m.close_sent) {
      m.close_sent = true;
      m.ws.async_close(
          websocket::close_reason(static_cast<websocket::close_code>(m.close_code), m.close_reason),
          [self = shared_from_this()](beast::error_code) {
            // The read loop ends with the peer's close (or the teardown): finish() there.
          });
    }
    return;
  }
  m.writing = true;
  m.ws.async_write(asio::buffer(m.out.front()),
                   [self = shared_from_this()](beast::error_code ec, std::size_t) {
                     auto& mm = *self->impl_;
                     if (!mm.out.empty()) {
                       mm.queued_bytes -= std::min(mm.queued_bytes, mm.out.front().size());
                       mm.out.pop_front();
                     }
                     if (ec) {
                       mm.writing = false;
                       mm.out.clear();
                       mm.queued_bytes = 0;
                       if (mm.session) mm.session->on_closed();
                       beast::error_code ignored;
                       beast::get_lowest_layer(mm.ws).close(ignored);
                       return;
                     }
                     self->write_next();
                   });
}

void WebSocketConnection::close(int code, std::string reason) {
  auto& m = *impl_;
  if (!m.open || m.close_pending || m.close_sent) return;
  m.close_pending = true;
  m.close_code = code;
  m.close_reason = std::move(reason);
  // A peer that never answers the close handshake is dropped.
  m.teardown_timer.expires_after(std::chrono::seconds(5));
  m.teardown_timer.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return;
    beast::error_code ignored;
    beast::get_lowest_layer(self->impl_->ws).close(ignored);
  });
  if (!m.writing) write_next();
}

void WebSocketConnection::finish(int close_code) {
  auto& m = *impl_;
  if (m.ended) return;
  m.ended = true;
  m.open = false;
  m.teardown_timer.cancel();
  for (auto& w : m.timers) {
    if (auto t = w.lock()) t->cancel();
  }
  m.timers.clear();
  if (m.session) {
    // The ended-sessions counter first: on_connection_ended() lowers the open-sessions gauge, and
    // a scrape that sees the gauge at 0 must also see the session counted. (A server-initiated
    // close, e.g. after session.finished, cancels the work at once but keeps the session open
    // until the handshake ends here.)
    m.api.state()
        .metrics.realtime_sessions_total->Add({{"close_code", std::to_string(close_code)}})
        .Increment();
    m.session->on_connection_ended();
    api::service_log::log("info", "realtime session closed",
                          {{"session_id", m.session->id()}, {"#close_code", std::to_string(close_code)}});
  }
  m.session.reset();
  m.hs.reset();
  beast::error_code ignored;
  beast::get_lowest_layer(m.ws).close(ignored);
  // `keep` (the HTTP session) goes with this object, once no handler holds it.
}

void WebSocketConnection::drain() {
  asio::post(impl_->exec, [self = shared_from_this()] {
    if (self->impl_->session) self->impl_->session->drain();
  });
}

}  // namespace vv::http
