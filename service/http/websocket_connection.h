// WebSocketConnection: a connection upgraded on GET /v1/realtime (API.md §10–§12), on Boost.Beast's
// websocket stream. It completes the RFC 6455 handshake (subprotocol `realtime` selected when
// offered, permessage-deflate declined), reads whole messages up to realtime.max_message_bytes
// (larger → close 1009; protocol violations → 1002; invalid UTF-8 in text → 1007, all sent by
// Beast), hands them to the RealtimeSession, writes its events with a bounded send queue
// (realtime.send_queue_bytes exceeded → close 1008 "client too slow"), pings when the peer is quiet
// for realtime.ping_interval_s and drops the TCP connection after twice that with nothing received.
// Threading: everything runs on the socket's strand; drain() may be called from any thread.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <memory>
#include <string>

#include "service/api/api.h"
#include "service/api/realtime_session.h"

namespace vv::http {

struct WebSocketOptions {
  std::size_t max_message_bytes = 16u << 20;
  std::size_t send_queue_bytes = 4u << 20;
  double ping_interval_s = 20;
  double handshake_timeout_s = 10;
  std::string server_header = "vibevoice-server";
};

class WebSocketConnection : public std::enable_shared_from_this<WebSocketConnection> {
 public:
  // `socket` must have a strand executor. `keep` is held until the connection ends (the HTTP
  // session whose connection this was: it keeps the connection counted toward http.max_connections).
  WebSocketConnection(api::Api& api, boost::asio::ip::tcp::socket socket, WebSocketOptions options,
                      std::shared_ptr<api::RealtimeHandshake> handshake, std::shared_ptr<void> keep);
  ~WebSocketConnection();

  // `request_bytes`: the upgrade request as received (head, then any bytes read past it).
  void start(std::string request_bytes);
  // §13.4 step 3 (any thread).
  void drain();

 private:
  class Transport;
  struct Impl;
  void on_accept(bool ok);
  void read();
  void enqueue(std::string text);
  void write_next();
  void close(int code, std::string reason);
  void finish(int close_code);

  std::unique_ptr<Impl> impl_;
};

}  // namespace vv::http
