# The sample job of deploy/kind/up.sh (the same script `forge-gateway dev` writes).
import os, time
print("forge sample: starting on", os.environ.get("FORGE_JOB_ID", "?"), flush=True)
for step in range(1, 4):
    print(f"step {step}/3 loss={1.0 / step:.3f}", flush=True)
    time.sleep(0.2)
print("forge sample: done", flush=True)
