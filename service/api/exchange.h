// Exchange: one HTTP request's way back to its client, as the handlers see it. The session
// implements it on its strand; unit tests implement it with a queue. Every method except post()
// must be called from the exchange's own serial executor (i.e. inside a post()ed function or the
// handler's first call).
#pragma once

#include <functional>
#include <string>

#include "service/http/http_message.h"

namespace vv::api {

class Exchange {
 public:
  virtual ~Exchange() = default;
  // Runs fn on the exchange's serial executor (thread-safe; from any thread).
  virtual void post(std::function<void()> fn) = 0;
  // Runs fn on the executor after `seconds` unless the exchange has ended.
  virtual void after(double seconds, std::function<void()> fn) = 0;
  // A complete response; ends the exchange.
  virtual void respond(http::HttpResponse response) = 0;
  // A streamed response: status and headers now (chunked), then write() chunks, then end_stream().
  // While streaming, the exchange writes SSE keep-alive comments by itself when idle.
  virtual void begin_stream(http::HttpResponse head) = 0;
  virtual void write(std::string data) = 0;
  virtual void end_stream() = 0;
  // Called (on the executor) when the client has gone away before the response was complete.
  virtual void on_disconnect(std::function<void()> fn) = 0;
  virtual bool disconnected() const = 0;
};

}  // namespace vv::api
