#include "master/client_registry.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace tierkv {
namespace {

uint64_t RandomBase() {
  std::random_device device;
  const uint64_t high = static_cast<uint64_t>(device()) << 32;
  const uint64_t now =
      static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  // Leave room below 2^64 so the counter never wraps to 0 in practice.
  uint64_t base = (high ^ device() ^ (now * 0x9e3779b97f4a7c15ull)) >> 1;
  return base == 0 ? 1 : base;
}

Status UnknownClient(ClientId id) {
  return Status(ErrorCode::INVALID_PARAMS,
                "unknown client id " + std::to_string(id) +
                    " (expired, or registered with an earlier master process): register again");
}

}  // namespace

ClientRegistry::ClientRegistry(const Clock* clock, Millis ttl, uint64_t id_base)
    : clock_(clock), ttl_(ttl), next_id_(id_base == 0 ? RandomBase() : id_base) {}

ClientId ClientRegistry::Register(std::string host) {
  const SteadyTime now = clock_->Now();
  std::lock_guard lock(mu_);
  ClientId id = next_id_++;
  if (id == 0) id = next_id_++;
  ClientInfo& info = clients_[id];
  info.id = id;
  info.host = std::move(host);
  info.registered = now;
  info.last_seen = now;
  return id;
}

std::optional<std::vector<SegmentId>> ClientRegistry::Unregister(ClientId id) {
  std::lock_guard lock(mu_);
  auto it = clients_.find(id);
  if (it == clients_.end()) return std::nullopt;
  std::vector<SegmentId> segments = std::move(it->second.segments);
  for (SegmentId s : segments) owners_.erase(s);
  clients_.erase(it);
  return segments;
}

bool ClientRegistry::Heartbeat(ClientId id, const std::vector<TransferCount>& transfers) {
  const SteadyTime now = clock_->Now();
  std::lock_guard lock(mu_);
  auto it = clients_.find(id);
  if (it == clients_.end()) return false;
  it->second.last_seen = std::max(it->second.last_seen, now);
  for (const TransferCount& count : transfers) {
    const std::optional<Transport> t = TransportFromName(count.transport);
    if (!t) continue;
    auto& [last_read, last_written] = it->second.reported[static_cast<size_t>(*t)];
    auto& [total_read, total_written] = totals_[static_cast<size_t>(*t)];
    // Growth since the last report (a lower count: the counter started again from 0),
    // saturating: a client reporting nonsense cannot wrap the totals around.
    auto add = [](uint64_t& total, uint64_t reported, uint64_t last) {
      const uint64_t grew = reported >= last ? reported - last : reported;
      total = grew > UINT64_MAX - total ? UINT64_MAX : total + grew;
    };
    add(total_read, count.read_bytes, last_read);
    add(total_written, count.written_bytes, last_written);
    last_read = count.read_bytes;
    last_written = count.written_bytes;
  }
  return true;
}

std::vector<TransferCount> ClientRegistry::TransferTotals() const {
  std::lock_guard lock(mu_);
  std::vector<TransferCount> out;
  for (size_t i = 0; i < kTransportNames.size(); ++i) {
    out.push_back({std::string(kTransportNames[i]), totals_[i].first, totals_[i].second});
  }
  return out;
}

bool ClientRegistry::Known(ClientId id) const {
  std::lock_guard lock(mu_);
  return clients_.contains(id);
}

Status ClientRegistry::AddSegment(ClientId client, SegmentId segment) {
  std::lock_guard lock(mu_);
  auto it = clients_.find(client);
  if (it == clients_.end()) return UnknownClient(client);
  auto [owner, inserted] = owners_.emplace(segment, client);
  if (!inserted) {
    return Status(ErrorCode::SEGMENT_ALREADY_EXISTS, "segment " + std::to_string(segment) +
                                                         " is already owned by client " +
                                                         std::to_string(owner->second));
  }
  it->second.segments.push_back(segment);
  return Status::Ok();
}

Status ClientRegistry::RemoveSegment(ClientId client, SegmentId segment) {
  std::lock_guard lock(mu_);
  auto it = clients_.find(client);
  if (it == clients_.end()) return UnknownClient(client);
  auto owner = owners_.find(segment);
  if (owner == owners_.end() || owner->second != client) {
    return Status(
        ErrorCode::SEGMENT_NOT_FOUND,
        "segment " + std::to_string(segment) + " is not owned by client " + std::to_string(client));
  }
  owners_.erase(owner);
  std::erase(it->second.segments, segment);
  return Status::Ok();
}

bool ClientRegistry::Owns(ClientId client, SegmentId segment) const {
  std::lock_guard lock(mu_);
  auto owner = owners_.find(segment);
  return owner != owners_.end() && owner->second == client;
}

ClientId ClientRegistry::OwnerOf(SegmentId segment) const {
  std::lock_guard lock(mu_);
  auto owner = owners_.find(segment);
  return owner == owners_.end() ? 0 : owner->second;
}

std::vector<ExpiredClient> ClientRegistry::ExpireSilent() {
  const SteadyTime now = clock_->Now();
  std::vector<ExpiredClient> expired;
  std::lock_guard lock(mu_);
  for (auto it = clients_.begin(); it != clients_.end();) {
    const auto silent = std::chrono::duration_cast<Millis>(now - it->second.last_seen);
    if (silent < ttl_) {
      ++it;
      continue;
    }
    ExpiredClient e;
    e.id = it->first;
    e.host = std::move(it->second.host);
    e.silent_for = silent;
    e.segments = std::move(it->second.segments);
    for (SegmentId s : e.segments) owners_.erase(s);
    expired.push_back(std::move(e));
    it = clients_.erase(it);
    ++expired_total_;
  }
  return expired;
}

std::optional<ClientInfo> ClientRegistry::Find(ClientId id) const {
  std::lock_guard lock(mu_);
  auto it = clients_.find(id);
  if (it == clients_.end()) return std::nullopt;
  return it->second;
}

size_t ClientRegistry::size() const {
  std::lock_guard lock(mu_);
  return clients_.size();
}

uint64_t ClientRegistry::expired_total() const {
  std::lock_guard lock(mu_);
  return expired_total_;
}

}  // namespace tierkv
