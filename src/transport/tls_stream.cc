#include "transport/tls_stream.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <utility>

namespace tierkv::transport {
namespace {

// OpenSSL's queued errors as one line (and the queue emptied).
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof(text));
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

Status TlsError(const std::string& what) {
  return Status(ErrorCode::INVALID_CONFIG, "data-plane TLS: " + what + ": " + OpenSslErrors());
}

SSL_CTX* NewContext(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Partial writes and a moving buffer: a non-blocking writer resumes with what is left.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

}  // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::Server(const std::string& cert_pem,
                                                       const std::string& key_pem) {
  SSL_CTX* ctx = NewContext(true);
  if (ctx == nullptr) return TlsError("SSL_CTX_new");
  std::shared_ptr<TlsContext> out(new TlsContext(ctx, true));
  SSL_CTX_set_num_tickets(ctx, 0);  // nothing unsolicited after the handshake
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  bool ok = cert != nullptr && SSL_CTX_use_certificate(ctx, cert) == 1;
  // The rest of the chain, if the file has one.
  while (ok) {
    X509* extra = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
    if (extra == nullptr) break;
    if (SSL_CTX_add_extra_chain_cert(ctx, extra) != 1) {
      X509_free(extra);
      ok = false;
    }
  }
  ERR_clear_error();  // the end of the chain reads as an error
  X509_free(cert);
  BIO_free(cert_bio);
  if (!ok) return TlsError("the certificate (PEM) cannot be used");
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!ok) return TlsError("the private key (PEM) cannot be used");
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return TlsError("the private key does not match the certificate");
  }
  return out;
}

Result<std::shared_ptr<TlsContext>> TlsContext::Client(const std::string& ca_pem) {
  SSL_CTX* ctx = NewContext(false);
  if (ctx == nullptr) return TlsError("SSL_CTX_new");
  std::shared_ptr<TlsContext> out(new TlsContext(ctx, false));
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  int added = 0;
  while (X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, ca) == 1) ++added;
    X509_free(ca);
  }
  BIO_free(bio);
  ERR_clear_error();
  if (added == 0) return TlsError("no CA certificate in the CA file");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

Result<std::unique_ptr<TlsStream>> TlsStream::Open(std::shared_ptr<const TlsContext> context,
                                                   int fd, const std::string& host) {
  SSL* ssl = SSL_new(context->get());
  if (ssl == nullptr) return TlsError("SSL_new");
  std::unique_ptr<TlsStream> stream(new TlsStream(context, ssl));
  if (SSL_set_fd(ssl, fd) != 1) return TlsError("SSL_set_fd");
  if (context->server()) {
    SSL_set_accept_state(ssl);
    return stream;
  }
  // The server's certificate must name the host dialled: an IP address, else a DNS name.
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {
    ERR_clear_error();
    if (X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) != 1) {
      return TlsError("the host name '" + host + "'");
    }
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
  SSL_set_connect_state(ssl);
  return stream;
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

ssize_t TlsStream::Fail(int result, const char* what) {
  const int e = SSL_get_error(ssl_, result);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    wants_write_ = e == SSL_ERROR_WANT_WRITE;
    ERR_clear_error();
    errno = EAGAIN;
    return -1;
  }
  if (e == SSL_ERROR_ZERO_RETURN) return 0;  // close_notify
  const long verify = SSL_get_verify_result(ssl_);
  error_ = std::string("TLS ") + what + ": " + OpenSslErrors();
  if (verify != X509_V_OK) {
    error_ += std::string(" (certificate: ") + X509_verify_cert_error_string(verify) + ")";
  }
  if (e == SSL_ERROR_SYSCALL && result == 0) {
    error_ = std::string("TLS ") + what + ": the peer closed the connection";
  }
  errno = EIO;
  return -1;
}

ssize_t TlsStream::Read(void* data, size_t size) {
  const int n = SSL_read(ssl_, data, static_cast<int>(std::min<size_t>(size, 1 << 30)));
  if (n > 0) return n;
  return Fail(n, "read");
}

ssize_t TlsStream::Write(const iovec* iov, int count) {
  ssize_t total = 0;
  for (int i = 0; i < count; ++i) {
    const size_t size = iov[i].iov_len;
    size_t done = 0;
    while (done < size) {
      const int n = SSL_write(ssl_, static_cast<const char*>(iov[i].iov_base) + done,
                              static_cast<int>(std::min<size_t>(size - done, 1 << 30)));
      if (n <= 0) {
        const ssize_t failed = Fail(n, "write");
        if (total > 0 && failed < 0 && errno == EAGAIN) return total;
        return failed < 0 ? failed : -1;
      }
      done += static_cast<size_t>(n);
      total += n;
    }
  }
  return total;
}

int TlsStream::Handshake() {
  const int n = SSL_do_handshake(ssl_);
  if (n == 1) return 1;
  return Fail(n, "handshake") < 0 && errno == EAGAIN ? 0 : -1;
}

bool TlsStream::Pending() const { return SSL_pending(ssl_) > 0; }

}  // namespace tierkv::transport
