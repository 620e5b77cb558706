// TLS for tierkv's TCP data transport (OpenSSL, user space: these kernels have no kTLS), off by
// default (docs/security.md). TlsContext holds the certificates of one side; TlsStream wraps
// one non-blocking socket and is used where the transport would call recv/sendmsg: the
// handshake runs inside the first reads and writes (SSL_set_accept_state /
// SSL_set_connect_state), and a call that would block returns -1 with errno EAGAIN, as the
// socket calls do. Servers send no session tickets: the requester's liveness check reads no
// unsolicited bytes. Thread-safety: a TlsContext is shared and thread-safe; a TlsStream is
// used by one thread at a time (its connection's).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <memory>
#include <string>

#include "tierkv/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace tierkv::transport {

class TlsContext {
 public:
  // A server's: its certificate chain and key (PEM contents). INVALID_CONFIG naming what
  // OpenSSL refused.
  static Result<std::shared_ptr<TlsContext>> Server(const std::string& cert_pem,
                                                    const std::string& key_pem);
  // A requester's: the CA that signed the servers' certificates (PEM contents); every server's
  // certificate must chain to it and name the host the requester dials.
  static Result<std::shared_ptr<TlsContext>> Client(const std::string& ca_pem);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool server() const { return server_; }
  SSL_CTX* get() const { return ctx_; }

 private:
  TlsContext(SSL_CTX* ctx, bool server) : ctx_(ctx), server_(server) {}
  SSL_CTX* ctx_;
  bool server_;
};

class TlsStream {
 public:
  // `host`: what a requester's server certificate must name (an IP address or a DNS name);
  // unused on a server.
  static Result<std::unique_ptr<TlsStream>> Open(std::shared_ptr<const TlsContext> context, int fd,
                                                 const std::string& host = "");
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // As recv(2): bytes read (> 0), 0 when the peer closed, -1 with errno EAGAIN (would block,
  // the handshake included) or EIO (a TLS failure: error() says what).
  ssize_t Read(void* data, size_t size);
  // As sendmsg(2) over `count` pieces: bytes written, or -1 with errno EAGAIN or EIO.
  ssize_t Write(const iovec* iov, int count);
  // Runs the handshake as far as it can without blocking: 1 done, 0 would block, -1 failed.
  int Handshake();
  // Decrypted bytes waiting inside the stream (a poll on the socket does not see them).
  bool Pending() const;
  // Whether the last call that would block waits for the socket to be writable.
  bool wants_write() const { return wants_write_; }
  const std::string& error() const { return error_; }

 private:
  TlsStream(std::shared_ptr<const TlsContext> context, SSL* ssl)
      : context_(std::move(context)), ssl_(ssl) {}
  // Maps an SSL_* result to the socket convention above.
  ssize_t Fail(int result, const char* what);

  std::shared_ptr<const TlsContext> context_;
  SSL* ssl_;
  bool wants_write_ = false;
  std::string error_;
};

}  // namespace tierkv::transport
