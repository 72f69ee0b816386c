from collections import defaultdict
users = defaultdict(set)
for line in context.splitlines():
    if "[ERROR]" in line:
        svc = line.split("service=")[1].split()[0]
        user = line.split("user=")[1].split()[0]
        users[svc].add(user)
summary = {svc: len(us) for svc, us in sorted(users.items())}
best = max(summary, key=(lambda *__rlm_a: summary.get(*__rlm_a)))
first_db = __rlm_next(l for l in context.splitlines() if "timeout talking to db" in l)
print(summary, first_db[:10])
submit(f"{best}:{summary[best]} first db timeout on {first_db[:10]}")
# expect: "auth:22 first db timeout on 2026-11-01"
