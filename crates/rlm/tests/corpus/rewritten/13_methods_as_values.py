# Methods passed as functions, the way models often write them.
lines = context.splitlines()[:50]
services = [l.split("service=")[1].split()[0] for l in lines]
cleaned = list(map((lambda __rlm_v, *__rlm_a: __rlm_v.strip(*__rlm_a)), [" " + s + " " for s in services]))
counts = {}
for s in cleaned:
    counts[s] = counts.get(s, 0) + 1
order = sorted(counts, key=(lambda *__rlm_a: counts.get(*__rlm_a)), reverse=True)
upper = list(map((lambda __rlm_v, *__rlm_a: __rlm_v.upper(*__rlm_a)), order[:2]))
users = sorted({l.split("user=")[1].split()[0] for l in lines}, key=(lambda __rlm_v, *__rlm_a: __rlm_v.lower(*__rlm_a)))
looked = list(map((lambda *__rlm_a: counts.get(*__rlm_a)), ["auth", "nope"]))
submit(f"{upper} {users[0]} {looked}")
# expect: "['STORAGE', 'BILLING'] u001 [10, None]"
