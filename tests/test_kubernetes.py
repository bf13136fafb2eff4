"""The Kubernetes device plugin without a cluster (cuwire/kubernetes/): the pool's allocation logic; the
plugin against a fake kubelet (its registration, the device list with each server's health, a preferred
allocation, a container's allocation, a kubelet restart); a container run with what the plugin gave it;
and the manifests of deploy/kubernetes/ checked against the Kubernetes schemas."""

from __future__ import annotations

import json
import threading
from concurrent import futures

import grpc
import pytest
from conftest import APPS_BUILD, ROOT, run_remote, wait_for

from cuwire.generated import deviceplugin_pb2 as pb
from cuwire.generated import deviceplugin_pb2_grpc as rpc
from cuwire.kubernetes.plugin import DevicePlugin, Served, answers_health, exposed_gpus
from cuwire.kubernetes.pool import Pool, PoolError

CONFIG = {"servers": [{"address": "gpu-a:50551", "gpus": 2},
                      {"address": "gpu-b.pool.svc:50551", "gpus": 3, "tls_fingerprint": "sha256:bb"}]}


def ids(pool: Pool, server: str) -> list[str]:
    return [g.id for g in pool.gpus if g.server == server]


def test_the_pool_names_each_gpu_of_each_server():
    pool = Pool.from_config(json.dumps(CONFIG))
    assert [g.id for g in pool.gpus] == ["gpu-a-50551-gpu0", "gpu-a-50551-gpu1", "gpu-b.pool.svc-50551-gpu0",
                                         "gpu-b.pool.svc-50551-gpu1", "gpu-b.pool.svc-50551-gpu2"]
    for bad in ('{"servers": [{"address": "no-port", "gpus": 1}]}', '{"servers": [{"address": "a:1"}]}',
                '{"servers": [{"address": "a:1", "gpus": 0}]}', "not json",
                '{"servers": [{"address": "a:1", "gpus": 1}, {"address": "a:1", "gpus": 1}]}'):
        with pytest.raises(PoolError, match="configuration"):
            Pool.from_config(bad)


def test_a_container_gets_the_devices_of_one_server():
    pool = Pool.from_config(json.dumps(CONFIG))
    a, b = ids(pool, "gpu-a:50551"), ids(pool, "gpu-b.pool.svc:50551")
    assert pool.container_env([b[2], b[0]], token="t") == {
        "CUWIRE_SERVER": "gpu-b.pool.svc:50551", "CUDA_VISIBLE_DEVICES": "0,2", "CUWIRE_TOKEN": "t",
        "CUWIRE_TLS_FINGERPRINT": "sha256:bb"}
    assert pool.container_env([a[1]], tls_fingerprint="sha256:all") == {
        "CUWIRE_SERVER": "gpu-a:50551", "CUDA_VISIBLE_DEVICES": "1", "CUWIRE_TLS_FINGERPRINT": "sha256:all"}
    with pytest.raises(PoolError, match="not in the pool"):
        pool.container_env(["elsewhere-gpu0"])


def test_a_container_across_servers_gets_them_as_one_device_list():
    """Devices of two servers: the device list of both, in the pool's order, CUDA_VISIBLE_DEVICES counted over
    the list's GPUs (gpu-a's 2, then gpu-b's), each server pinned with its own; a server without a pin among
    pinned ones is refused by name."""
    pool = Pool.from_config(json.dumps(CONFIG))
    a, b = ids(pool, "gpu-a:50551"), ids(pool, "gpu-b.pool.svc:50551")
    assert pool.container_env([b[1], a[1]], token="t", tls_fingerprint="sha256:aa") == {
        "CUWIRE_SERVER": "gpu-a:50551,gpu-b.pool.svc:50551", "CUDA_VISIBLE_DEVICES": "1,3", "CUWIRE_TOKEN": "t",
        "CUWIRE_TLS_FINGERPRINT": "sha256:aa,sha256:bb"}
    with pytest.raises(PoolError, match="gpu-a:50551 has no TLS fingerprint"):
        pool.container_env([a[0], b[0]])
    plain = Pool.from_config('{"servers": [{"address": "x:1", "gpus": 1}, {"address": "y:1", "gpus": 2}]}')
    assert plain.container_env(["x-1-gpu0", "y-1-gpu1"]) == {"CUWIRE_SERVER": "x:1,y:1", "CUDA_VISIBLE_DEVICES": "0,2"}


def test_the_preferred_allocation_keeps_a_container_on_one_server_where_it_can():
    pool = Pool.from_config(json.dumps(CONFIG))
    a, b = ids(pool, "gpu-a:50551"), ids(pool, "gpu-b.pool.svc:50551")
    assert pool.preferred(a + b, [], 2) == b[:2]  # the server with the most free
    assert pool.preferred(a + b[:1], [], 2) == a  # ...now gpu-a
    assert pool.preferred(a + b, [b[2]], 2) == [b[2], b[0]]  # where the must-include device is
    assert pool.preferred(a[:1] + b[:1], [], 1) == a[:1]  # a tie: the pool's order
    assert pool.preferred(a + b, [], 4) == b + a[:1]  # more than one server has: the next one for the rest
    assert pool.preferred(a + b, [a[0], b[0]], 2) == [a[0], b[0]]  # must-include devices of two servers


class FakeKubelet(rpc.RegistrationServicer):
    """The kubelet's side: it takes registrations on its socket and remembers them."""

    def __init__(self):
        self.registered: list[pb.RegisterRequest] = []

    def Register(self, request, context):
        self.registered.append(request)
        return pb.Empty()


def test_the_plugin_against_a_fake_kubelet(tmp_path, server, client_lib, apps):
    """Registration, the device list (the live emulated server healthy, a dead address not), a preferred
    allocation, an allocation whose settings run a CUDA program, a mixed one refused, and registration
    again after the kubelet restarted (its folder emptied)."""
    folder = tmp_path / "device-plugins"
    folder.mkdir()
    kubelet = FakeKubelet()
    kubelet_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_RegistrationServicer_to_server(kubelet, kubelet_server)
    kubelet_server.add_insecure_port(f"unix://{folder / 'kubelet.sock'}")
    kubelet_server.start()
    pool = Pool.from_config(json.dumps({"servers": [{"address": server.address, "gpus": 1},
                                                    {"address": "127.0.0.1:1", "gpus": 2}]}))
    plugin = DevicePlugin(pool, token="secret")
    plugin.check_health()
    served = Served(plugin, folder)
    stop = threading.Event()
    runner = threading.Thread(target=served.run, args=(stop, 0.2))
    runner.start()
    try:
        assert wait_for(lambda: kubelet.registered), "the plugin did not register"
        request = kubelet.registered[0]
        assert (request.version, request.resource_name, request.endpoint) == ("v1beta1", "cuwire.dev/gpu",
                                                                               "cuwire.sock")
        assert request.options.get_preferred_allocation_available
        with grpc.insecure_channel(f"unix://{folder / request.endpoint}") as channel:
            stub = rpc.DevicePluginStub(channel)
            assert stub.GetDevicePluginOptions(pb.Empty(), timeout=5).get_preferred_allocation_available
            listing = next(stub.ListAndWatch(pb.Empty(), timeout=5))
            health = {d.ID: d.health for d in listing.devices}
            live, dead = pool.gpus[0].id, [g.id for g in pool.gpus[1:]]
            assert health == {live: "Healthy", dead[0]: "Unhealthy", dead[1]: "Unhealthy"}
            preferred = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=[live, *dead], allocation_size=2)]),
                timeout=5)
            assert list(preferred.container_responses[0].deviceIDs) == dead
            given = stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[live])]), timeout=5)
            env = dict(given.container_responses[0].envs)
            assert env == {"CUWIRE_SERVER": server.address, "CUDA_VISIBLE_DEVICES": "0", "CUWIRE_TOKEN": "secret"}
            across = stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[live, dead[1]])]), timeout=5)
            assert dict(across.container_responses[0].envs) == {
                "CUWIRE_SERVER": f"{server.address},127.0.0.1:1", "CUDA_VISIBLE_DEVICES": "0,2",
                "CUWIRE_TOKEN": "secret"}  # (a device list: the second server's GPU 1 is the list's 2)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Allocate(pb.AllocateRequest(container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=[live, "elsewhere-gpu0"])]), timeout=5)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "not in the pool" in refused.value.details()
        # the container, as the kubelet starts it with those settings (the emulated server wants no token)
        env.pop("CUWIRE_TOKEN")
        r = run_remote(APPS_BUILD / "vector_add", client_lib, env.pop("CUWIRE_SERVER"), env=env)
        assert r.returncode == 0 and "vector_add: PASS" in r.stdout, r.stderr
        (folder / "cuwire.sock").unlink()  # a kubelet restart empties the folder
        assert wait_for(lambda: len(kubelet.registered) == 2), "the plugin did not register again"
        assert (folder / "cuwire.sock").exists()
    finally:
        stop.set()
        runner.join(10)
        kubelet_server.stop(grace=None)


def test_a_server_exposing_fewer_gpus_than_the_pool_says_has_the_others_unhealthy(server):
    """The plugin counts each server's GPUs by a check of the hello (the emulated server: 1); where the pool says
    more, the GPUs past them are unhealthy (a container across servers counts its GPUs by the pool's numbers),
    and a server that cannot be counted keeps its devices as /healthz says."""
    assert exposed_gpus(server.address, "", "") == 1 and exposed_gpus("127.0.0.1:1", "", "", timeout=1) is None
    pool = Pool.from_config(json.dumps({"servers": [{"address": "gpu-a:1", "gpus": 3}, {"address": "gpu-b:1",
                                                                                        "gpus": 2}]}))
    counts = {"gpu-a:1": 2, "gpu-b:1": None}
    plugin = DevicePlugin(pool, probe=lambda s, tls: True, count=lambda s, token, pin: counts[s])
    plugin.check_health()
    assert [d.health for d in plugin.devices()] == ["Healthy", "Healthy", "Unhealthy", "Healthy", "Healthy"]
    counts["gpu-a:1"] = 3  # (the server comes back with all of them)
    plugin.check_health()
    assert all(d.health == "Healthy" for d in plugin.devices())


def test_health_is_the_servers_own_answer(server):
    assert answers_health(server.address, tls=False)
    assert not answers_health("127.0.0.1:1", tls=False, timeout=1)


MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))


def test_the_manifests_are_valid_kubernetes_objects():
    """Every document of deploy/kubernetes/ against the schemas of Kubernetes 1.33 (kubernetes-validate)."""
    import kubernetes_validate
    import yaml

    assert MANIFESTS
    kinds = set()
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                kubernetes_validate.validate(doc, "1.33", strict=True)
                kinds.add(doc["kind"])
    assert {"DaemonSet", "Service", "ConfigMap", "Secret", "Namespace"} <= kinds


def test_the_manifests_say_what_the_plugin_and_server_need():
    import yaml

    docs = [d for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if d]
    sets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}
    server = sets["cuwire-server"]["spec"]["template"]["spec"]
    container = server["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"  # the server speaks TLS
    assert server["terminationGracePeriodSeconds"] >= 15  # the 10 s drain fits
    assert any(e.get("valueFrom", {}).get("secretKeyRef") for e in container["env"])  # the token from a Secret
    plugin = sets["cuwire-device-plugin"]["spec"]["template"]["spec"]
    mounts = {m["mountPath"] for m in plugin["containers"][0]["volumeMounts"]}
    assert "/var/lib/kubelet/device-plugins" in mounts and "/etc/cuwire" in mounts
    assert plugin["containers"][0]["command"][:3] == ["python3", "-m", "cuwire.kubernetes"]
