#include "transport/network_segment.h"

#include "transport/tcp_segment_client.h"
#include "transport/tcp_segment_server.h"
#include "transport/ucx_segment_client.h"
#include "transport/ucx_segment_server.h"

namespace tierkv::transport {

Result<std::unique_ptr<NetworkSegmentServer>> StartNetworkSegmentServer(
    std::shared_ptr<MemorySegment> segment, const std::string& host, int port,
    const UcxTransportOptions& options, std::shared_ptr<StageSource> stages) {
  if (options.protocol == "tcp") {
    auto server =
        TcpSegmentServer::Start(std::move(segment), host, port, options, std::move(stages));
    if (!server.ok()) return server.status();
    return std::unique_ptr<NetworkSegmentServer>(std::move(server).value());
  }
  if (options.protocol == "rdma") {
    auto server =
        UcxSegmentServer::Start(std::move(segment), host, port, options, std::move(stages));
    if (!server.ok()) return server.status();
    return std::unique_ptr<NetworkSegmentServer>(std::move(server).value());
  }
  return Status(ErrorCode::INVALID_CONFIG, "network transport: protocol \"" + options.protocol +
                                               "\" is not one of \"tcp\", \"rdma\"");
}

Result<std::unique_ptr<NetworkSegmentClient>> ConnectNetworkSegment(
    const std::string& address, const std::string& segment_name, std::chrono::milliseconds timeout,
    const UcxTransportOptions& options) {
  if (options.protocol == "tcp") {
    auto client = TcpSegmentClient::Connect(address, segment_name, timeout, options);
    if (!client.ok()) return client.status();
    return std::unique_ptr<NetworkSegmentClient>(std::move(client).value());
  }
  if (options.protocol == "rdma") {
    auto client = UcxSegmentClient::Connect(address, segment_name, timeout, options);
    if (!client.ok()) return client.status();
    return std::unique_ptr<NetworkSegmentClient>(std::move(client).value());
  }
  return Status(ErrorCode::INVALID_CONFIG, "network transport: protocol \"" + options.protocol +
                                               "\" is not one of \"tcp\", \"rdma\"");
}

}  // namespace tierkv::transport
