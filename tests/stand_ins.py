"""What the stand-ins for the CLIs that apply a stack (cdktf, terraform) share with the real ones.

HELM_OPENS is Python source a stand-in runs in Terraform's working directory, the stack's folder: the helm provider
opens each local release's chart and post-renderer from there, so a path the real apply could not open fails the
stand-in too (exit 1, naming the release and the path).

PROVIDER_EXECS is Python source a terraform stand-in runs there at plan and apply: the kubernetes and helm providers
run their client-go credential plugin (`exec`) to reach the cluster, so a runner without that command fails the
stand-in as it fails the real provider.
"""

HELM_OPENS = r"""
import json, os, sys
stack_dir = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
stack = json.load(open(os.path.join(stack_dir, "cdk.tf.json")))
for release in stack.get("resource", {}).get("helm_release", {}).values():
    opened = [] if "repository" in release else [os.path.join(release["chart"], "Chart.yaml")]
    opened += [release["postrender"]["binary_path"]] if "postrender" in release else []
    for path in opened:
        if not os.path.isfile(os.path.join(stack_dir, path)):
            sys.exit(f"helm_release {release['name']}: {path} not found from {stack_dir}")
"""

PROVIDER_EXECS = r"""
import json, os, subprocess, sys
stack = json.load(open(os.path.join(os.getcwd(), "cdk.tf.json")))
for name, blocks in stack.get("provider", {}).items():
    for block in blocks:
        found = block.get("exec") if name == "kubernetes" else (block.get("kubernetes") or {}).get("exec")
        for one in found if isinstance(found, list) else [found] if found else []:
            try:
                subprocess.run([one["command"], *one.get("args", [])], check=True, stdout=subprocess.DEVNULL)
            except (OSError, subprocess.CalledProcessError) as err:
                sys.exit(f"provider {name}: exec plugin {one['command']}: {err}")
"""
