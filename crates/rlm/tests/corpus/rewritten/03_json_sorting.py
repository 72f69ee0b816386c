import json
rows = []
for line in context.splitlines():
    parts = line.split()
    fields = dict(p.split("=", 1) for p in parts if "=" in p and not p.startswith("code="))
    if "latency_ms" in fields:
        rows.append({"user": fields["user"], "ms": int(fields["latency_ms"])})
slowest = sorted(rows, key=lambda r: (-r["ms"], r["user"]))[:3]
payload = json.dumps(slowest, sort_keys=True)
back = json.loads(payload)
submit(";".join(f"{r['user']}:{r['ms']}" for r in back))
# expect: "u003:900;u030:900;u003:898"
