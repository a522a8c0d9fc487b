"""Checks of rendered deploy/ manifests that JSON schemas cannot express.

Run by deploy/validate.sh after the schema validation, with the venv's Python (PyYAML
comes with kubernetes-validate):

    check_manifests.py NAME NAMESPACE RENDERED.yaml

NAME selects the per-overlay expectations (`single`, `ha`, `kind`, `storage-example`,
`other-namespace`). Prints one line per problem, naming the object, and exits 1 if
there is any.
"""

import sys

import yaml

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}
# Created out of band by the platform team (deploy/README.md), never rendered.
EXTERNAL_SECRETS = {"forge-s3", "forge-tokens", "forge-database"}
# A Kubernetes volume names exactly one source besides its name.
VOLUME_FIELDS_NOT_SOURCES = {"name"}


class Checker:
    def __init__(self, name, namespace, docs):
        self.name = name
        self.namespace = namespace
        self.docs = docs
        self.problems = []

    def problem(self, obj, message):
        self.problems.append(f"ERROR [{self.name}] {obj['kind']}/{obj['metadata']['name']}: {message}")

    def of_kind(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    def names(self, kind):
        return {d["metadata"]["name"] for d in self.of_kind(kind)}

    def run(self):
        for obj in self.docs:
            self.check_namespace(obj)
        for binding in self.of_kind("RoleBinding") + self.of_kind("ClusterRoleBinding"):
            self.check_binding(binding)
        deployments = self.of_kind("Deployment")
        if [d["metadata"]["name"] for d in deployments] != ["forge-gateway"]:
            self.problems.append(f"ERROR [{self.name}]: expected exactly one Deployment forge-gateway")
            return self.problems
        self.check_deployment(deployments[0])
        self.check_gateway_network_policy(deployments[0])
        shape = getattr(self, "shape_" + self.name.replace("-", "_"), None)
        if shape:
            shape(deployments[0])
        return self.problems

    def check_namespace(self, obj):
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            if ns:
                self.problem(obj, f"cluster-scoped object has a namespace ({ns})")
            if obj["kind"] == "Namespace" and obj["metadata"]["name"] != self.namespace:
                self.problem(obj, f"expected Namespace {self.namespace}")
        elif ns != self.namespace:
            self.problem(obj, f"namespace is {ns!r}, expected {self.namespace!r} (never the kubectl context's)")

    def check_binding(self, binding):
        for subject in binding.get("subjects", []):
            if subject.get("kind") == "ServiceAccount" and subject.get("namespace") != self.namespace:
                self.problem(binding, f"subject {subject['name']} in namespace {subject.get('namespace')!r}")
        ref = binding["roleRef"]
        if ref["name"] not in self.names(ref["kind"]):
            self.problem(binding, f"roleRef {ref['kind']}/{ref['name']} is not rendered")

    def check_deployment(self, dep):
        pod = dep["spec"]["template"]["spec"]
        if pod.get("serviceAccountName") not in self.names("ServiceAccount"):
            self.problem(dep, f"serviceAccountName {pod.get('serviceAccountName')!r} is not rendered")
        psc = pod.get("securityContext", {})
        if not psc.get("runAsNonRoot") or psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            self.problem(dep, "pod securityContext needs runAsNonRoot and seccomp RuntimeDefault")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for volume in volumes.values():
            sources = sorted(set(volume) - VOLUME_FIELDS_NOT_SOURCES)
            if len(sources) != 1:
                self.problem(dep, f"volume {volume['name']} has {len(sources)} sources {sources}, needs exactly 1")
            self.check_volume_reference(dep, volume)
        for container in pod["containers"]:
            self.check_container(dep, container, volumes)

    def check_gateway_network_policy(self, dep):
        """A NetworkPolicy selects the gateway's pods, restricts their ingress, admits
        peers only to the gateway's named container port, and lets Forge's job pods in."""
        pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})
        ports = {p.get("name") for c in dep["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        covering = [
            np for np in self.of_kind("NetworkPolicy")
            if all(pod_labels.get(k) == v for k, v in np["spec"]["podSelector"].get("matchLabels", {}).items())
            and "Ingress" in np["spec"].get("policyTypes", [])
        ]
        if not covering:
            self.problem(dep, "no NetworkPolicy restricts ingress to the gateway's pods")
            return
        for np in covering:
            rules = np["spec"].get("ingress", [])
            for rule in rules:
                if not rule.get("from"):
                    self.problem(np, "an ingress rule without `from` admits everyone")
                for port in rule.get("ports", []) or [None]:
                    if port is None or port.get("port") not in ports:
                        self.problem(np, f"ingress port {port!r} is not one of the gateway's ports {sorted(ports)}")
            jobs = [
                peer for rule in rules for peer in rule.get("from", [])
                if peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/managed-by") == "forge-gateway"
            ]
            if not jobs:
                self.problem(np, "Forge's job pods (app.kubernetes.io/managed-by=forge-gateway) cannot reach the gateway")

    def check_volume_reference(self, dep, volume):
        if "configMap" in volume and volume["configMap"]["name"] not in self.names("ConfigMap"):
            self.problem(dep, f"volume {volume['name']}: ConfigMap {volume['configMap']['name']} is not rendered")
        if "secret" in volume and volume["secret"]["secretName"] not in EXTERNAL_SECRETS:
            self.problem(dep, f"volume {volume['name']}: unknown Secret {volume['secret']['secretName']}")
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            if claim not in self.names("PersistentVolumeClaim"):
                self.problem(dep, f"volume {volume['name']}: PersistentVolumeClaim {claim} is not rendered")

    def check_container(self, dep, c, volumes):
        where = f"container {c['name']}"
        sc = c.get("securityContext", {})
        if not (
            sc.get("readOnlyRootFilesystem") is True
            and sc.get("allowPrivilegeEscalation") is False
            and sc.get("capabilities", {}).get("drop") == ["ALL"]
        ):
            self.problem(dep, f"{where}: needs readOnlyRootFilesystem, no privilege escalation, drop ALL")
        probes = {
            "startupProbe": "/readyz",
            "readinessProbe": "/readyz",
            "livenessProbe": "/livez",
        }
        for probe, path in probes.items():
            got = c.get(probe, {}).get("httpGet", {}).get("path")
            if got != path:
                self.problem(dep, f"{where}: {probe} must GET {path}, has {got!r}")
        resources = c.get("resources", {})
        if not resources.get("requests") or not resources.get("limits"):
            self.problem(dep, f"{where}: needs resource requests and limits")
        for ref in c.get("envFrom", []):
            if "configMapRef" in ref and ref["configMapRef"]["name"] not in self.names("ConfigMap"):
                self.problem(dep, f"{where}: envFrom ConfigMap {ref['configMapRef']['name']} is not rendered")
            if "secretRef" in ref and ref["secretRef"]["name"] not in EXTERNAL_SECRETS:
                self.problem(dep, f"{where}: envFrom unknown Secret {ref['secretRef']['name']}")
        for var in c.get("env", []):
            secret = var.get("valueFrom", {}).get("secretKeyRef")
            if secret and secret["name"] not in EXTERNAL_SECRETS:
                self.problem(dep, f"{where}: env {var['name']} from unknown Secret {secret['name']}")
        mounted = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                self.problem(dep, f"{where}: mount {m['mountPath']} names no volume ({m['name']})")
        # FORGE_INSTANCE is the installation's identity, recorded in the store and shared
        # by every replica: a per-pod value (the pod name) is refused at start by a
        # store that recorded another one. The pod name is FORGE_REPLICA.
        for var in c.get("env", []):
            if var["name"] == "FORGE_INSTANCE" and "fieldRef" in var.get("valueFrom", {}):
                self.problem(dep, f"{where}: FORGE_INSTANCE must not be per pod (use FORGE_REPLICA)")
        replica = next((v for v in c.get("env", []) if v["name"] == "FORGE_REPLICA"), {})
        if replica.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "metadata.name":
            self.problem(dep, f"{where}: FORGE_REPLICA must be the pod name (leader-lease holder)")
        env = {v["name"]: v.get("value") for v in c.get("env", [])}
        for var in ("FORGE_DATA_DIR", "FORGE_TOKENS_FILE", "FORGE_POLICY_CHAIN_FILE"):
            path = env.get(var)
            if not path or not any(path == p or path.startswith(p.rstrip("/") + "/") for p in mounted):
                self.problem(dep, f"{where}: {var}={path!r} is not on a mounted volume")

    # Per-overlay shape -------------------------------------------------------------

    def env(self, dep):
        return {v["name"]: v for v in dep["spec"]["template"]["spec"]["containers"][0].get("env", [])}

    def data_volume(self, dep):
        volumes = dep["spec"]["template"]["spec"]["volumes"]
        return next(v for v in volumes if v["name"] == "data")

    def shape_single(self, dep):
        spec = dep["spec"]
        if spec.get("replicas") != 1 or spec.get("strategy", {}).get("type") != "Recreate":
            self.problem(dep, "single: needs replicas 1 and strategy Recreate (one SQLite writer)")
        claim = self.data_volume(dep).get("persistentVolumeClaim", {}).get("claimName")
        pvcs = {p["metadata"]["name"]: p for p in self.of_kind("PersistentVolumeClaim")}
        if claim != "forge-data" or pvcs.get("forge-data", {}).get("spec", {}).get("accessModes") != ["ReadWriteOnce"]:
            self.problem(dep, "single: the data volume must be the ReadWriteOnce claim forge-data")
        if "FORGE_DATABASE_URL" in self.env(dep):
            self.problem(dep, "single: FORGE_DATABASE_URL is set (single runs SQLite)")

    def shape_kind(self, dep):
        self.shape_single(dep)

    def shape_storage_example(self, dep):
        self.shape_single(dep)
        pvcs = {p["metadata"]["name"]: p for p in self.of_kind("PersistentVolumeClaim")}
        modes = pvcs.get("starforge-storage", {}).get("spec", {}).get("accessModes")
        if modes != ["ReadWriteMany"]:
            self.problems.append(f"ERROR [{self.name}]: no ReadWriteMany claim starforge-storage")

    def shape_ha(self, dep):
        spec = dep["spec"]
        rolling = spec.get("strategy", {}).get("rollingUpdate", {})
        if spec.get("replicas", 1) < 2 or rolling.get("maxUnavailable") != 0:
            self.problem(dep, "ha: needs several replicas and RollingUpdate maxUnavailable 0")
        ref = self.env(dep).get("FORGE_DATABASE_URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
        if (ref.get("name"), ref.get("key")) != ("forge-database", "url"):
            self.problem(dep, "ha: FORGE_DATABASE_URL must come from Secret forge-database, key url")
        if "emptyDir" not in self.data_volume(dep):
            self.problem(dep, "ha: the data directory is a per-pod emptyDir cache")
        if not self.of_kind("PodDisruptionBudget"):
            self.problem(dep, "ha: no PodDisruptionBudget")
        if not spec["template"]["spec"].get("affinity", {}).get("podAntiAffinity"):
            self.problem(dep, "ha: no pod anti-affinity")

    def shape_other_namespace(self, dep):
        self.shape_ha(dep)


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    name, namespace, path = argv[1:]
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    problems = Checker(name, namespace, docs).run()
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
