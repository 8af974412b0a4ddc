// HttpServer: the Beast HTTP/1.1 listener of `vibevoice serve` — one io_context run by a small
// thread pool, one session per connection on its own strand. Sessions read the head, let the Api
// decide what it can from it (§2.4 steps 1–10), honour Expect: 100-continue, stream the body
// through the multipart parser (or into a bounded JSON buffer), watch the socket for the client
// going away, and write plain, chunked or SSE responses with the §13.5 timeouts.
// Thread-safe: bind() then run() from the main thread; the rest from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <prometheus/gauge.h>

#include "config/status.h"
#include "service/api/api.h"

namespace vv::http {

class Session;

struct ServerLimits {
  std::size_t max_connections = 1024;
  std::size_t max_header_bytes = 16384;
  std::size_t max_uri_bytes = 8192;
  double header_timeout_s = 10;
  double body_idle_timeout_s = 30;
  double body_timeout_s = 600;
  double keepalive_timeout_s = 75;
  std::size_t max_multipart_parts = 128;
  std::size_t max_form_field_bytes = 65536;
  std::uint64_t discard_body_bytes = 1 << 20;
  double lingering_close_s = 2;
  double sse_keepalive_s = 15;
  bool access_log = true;
  std::string server_header = "vibevoice-server";
};

class HttpServer {
 public:
  HttpServer(api::Api& api, ServerLimits limits);
  ~HttpServer();

  // Binds and listens; returns the bound port (useful with port 0).
  Result<std::uint16_t> bind(const std::string& host, std::uint16_t port);
  // Starts `threads` I/O threads running the io_context.
  void run(int threads);
  // Stops accepting and the io_context; joins the threads.
  void stop();
  // §13.4 step 3: closes connections waiting for their next request.
  void close_idle_connections();

  boost::asio::io_context& io() { return io_; }
  api::Api& api() { return api_; }
  const ServerLimits& limits() const { return limits_; }
  // Requests between head and last byte.
  std::int64_t active_requests() const { return active_requests_.load(); }

  // Session bookkeeping, shared with the sessions: a session may be destroyed after the server
  // (its pending handlers die with the io_context), so it only touches this.
  struct Registry {
    std::mutex mu;
    std::set<std::weak_ptr<Session>, std::owner_less<std::weak_ptr<Session>>> sessions;
    std::atomic<std::size_t> connections{0};
    prometheus::Gauge* gauge = nullptr;
    void opened(const std::shared_ptr<Session>& s);
    void closed();
  };
  std::shared_ptr<Registry> registry() { return registry_; }
  std::atomic<std::int64_t> active_requests_{0};

 private:
  void accept();

  api::Api& api_;
  ServerLimits limits_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  std::shared_ptr<Registry> registry_ = std::make_shared<Registry>();
  bool stopped_ = false;
};

}  // namespace vv::http
