# Methods passed as functions, the way models often write them.
lines = context.splitlines()[:50]
services = [l.split("service=")[1].split()[0] for l in lines]
cleaned = list(map(str.strip, [" " + s + " " for s in services]))
counts = {}
for s in cleaned:
    counts[s] = counts.get(s, 0) + 1
order = sorted(counts, key=counts.get, reverse=True)
upper = list(map(str.upper, order[:2]))
users = sorted({l.split("user=")[1].split()[0] for l in lines}, key=str.lower)
looked = list(map(counts.get, ["auth", "nope"]))
submit(f"{upper} {users[0]} {looked}")
# expect: "['STORAGE', 'BILLING'] u001 [10, None]"
