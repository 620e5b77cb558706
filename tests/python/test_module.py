"""The module: version, ErrorCode, strerror, ReplicateConfig, and every form of setup()."""

import pytest

import tierkv
from tierkv import ErrorCode as E


def test_names_and_codes():
    assert tierkv.__version__.count(".") == 2
    assert tierkv.MooncakeDistributedStore is tierkv.DistributedStore
    assert int(E.OK) == 0 and int(E.OBJECT_NOT_FOUND) == -704 and int(E.INVALID_CONFIG) == -1503
    assert {"NO_AVAILABLE_HANDLE", "BUFFER_NOT_REGISTERED", "LEASE_EXPIRED"} <= set(E.__members__)
    assert len(E) >= 30
    assert tierkv.strerror(-704) == "OBJECT_NOT_FOUND (-704)"
    assert tierkv.strerror(-12345) == "UNKNOWN (-12345)"


def test_replicate_config():
    cfg = tierkv.ReplicateConfig()
    assert (cfg.replica_num, cfg.with_hard_pin, cfg.with_soft_pin) == (1, False, False)
    assert cfg.soft_pin_action == tierkv.SoftPinAction.PRESERVE
    assert cfg.soft_pin_ttl_ms is None and cfg.group_ids == [] and cfg.preferred_segments == []
    cfg.soft_pin_action = tierkv.SoftPinAction.ENABLE
    cfg.soft_pin_ttl_ms = 60_000
    cfg.soft_pin_ttl_ms = None
    cfg.soft_pin_ttl_ms = (1 << 64) - 1
    for bad in (-1, 1 << 64):
        with pytest.raises(TypeError):
            cfg.soft_pin_ttl_ms = bad
    cfg.preferred_segment = "seg"
    cfg.prefer_alloc_in_same_node = True
    cfg.group_ids = ["a", ""]
    text = str(cfg)
    assert "ENABLE" in text and '"seg"' in text and '["a", ""]' in text


def test_setup_positional_and_keywords(key):
    s = tierkv.DistributedStore()
    assert s.setup(local_hostname="h1", metadata_server="P2PHANDSHAKE",
                   global_segment_size=16 << 20, local_buffer_size=1 << 20, protocol="tcp",
                   rdma_devices="", master_server_addr="") == 0
    assert s.get_hostname().startswith("h1:")  # its segment, "h1:<pid>:<n>"
    assert s.setup("h1", "P2PHANDSHAKE", 16 << 20, 1 << 20, "tcp", "", "") == E.INVALID_PARAMS
    assert s.close() == 0
    with pytest.raises(TypeError, match="missing required"):
        s.setup("h", "P2PHANDSHAKE", 16 << 20)
    with pytest.raises(TypeError, match="unexpected keyword"):
        s.setup("h", "P2PHANDSHAKE", 16 << 20, 1 << 20, "tcp", "", "", bogus=1)
    # A transfer engine (SGLang passes its own as transfer_engine=) is not used: a warning.
    for name in ("engine", "transfer_engine"):
        with pytest.warns(UserWarning, match="transfer engine"):
            assert s.setup("h", "P2PHANDSHAKE", 16 << 20, 1 << 20, "tcp", "", "",
                           **{name: object()}) == 0
        assert s.close() == 0
    # device_name is accepted for rdma_devices (vLLM's config name).
    assert s.setup("h", "P2PHANDSHAKE", 16 << 20, "1 MB", "tcp", master_server_addr="",
                   device_name="") == 0
    assert s.close() == 0


def test_setup_dict_sizes_and_errors(cluster):
    s = tierkv.DistributedStore()
    base = {"local_hostname": "h", "metadata_server": "P2PHANDSHAKE", "master_server_addr": ""}
    for size in (16 << 20, "16MB", "16 MB", "16MiB"):
        assert s.setup(dict(base, global_segment_size=size, local_buffer_size="1MB")) == 0, size
        assert s.put("x", b"y") == 0 and s.close() == 0
    for bad in ({"global_segment_size": "50%"}, {"local_buffer_size": -1},
                {"global_segment_size": 1.5}, {"no_such_key": 1}, {"tenant_id": "no/slash"},
                {"enable_client_http_server": True}, {"protocol": object()}):
        assert s.setup(dict(base, **bad)) != 0, bad
    assert s.setup({"local_hostname": "h"}) == E.INVALID_CONFIG  # metadata_server is required
    # Mooncake's dict default master address is 127.0.0.1:50051; a tierkv config key passes.
    assert s.setup(dict(base, global_segment_size="16MB", local_buffer_size=0,
                        verify_checksum=False)) == 0
    assert s.close() == 0
    # The dict form against the session's master: a standalone requester.
    assert s.setup({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
                    "global_segment_size": 0, "local_buffer_size": "1MB", "protocol": "auto",
                    "master_server_addr": cluster["address"]}) == 0
    assert s.health_check() == 0
    assert s.close() == 0


def test_setup_failures_return_codes():
    s = tierkv.DistributedStore()
    # Nothing listens there: the requester cannot register (RPC_FAIL within its timeout).
    assert s.setup("h", "P2PHANDSHAKE", 0, 1 << 20, "auto", "", "127.0.0.1:1") != 0
    assert "setup" in s.last_error()
    assert s.setup("h", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", "") == E.INVALID_CONFIG
    assert s.setup("h", "P2PHANDSHAKE", 16 << 20, 1 << 20, "carrier-pigeon", "", "") != 0
    assert s.health_check() == 1
