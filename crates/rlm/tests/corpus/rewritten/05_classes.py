class ServiceStats:
    def __init__(self, name):
        self.name = name
        self.count = 0
        self.total_ms = 0

    def add(self, ms):
        self.count += 1
        self.total_ms += ms

    def mean(self):
        return self.total_ms / self.count if self.count else 0.0

stats = {}
for line in context.splitlines():
    m = re.search(r"service=(\w+) user=\w+ latency_ms=(\d+)", line)
    if not m:
        continue
    name, ms = m.group(1), int(m.group(2))
    if name not in stats:
        stats[name] = ServiceStats(name)
    stats[name].add(ms)
worst = max(stats.values(), key=lambda s: s.mean())
submit(f"{worst.name} {worst.mean():.1f}")
# expect: "billing 468.7"
