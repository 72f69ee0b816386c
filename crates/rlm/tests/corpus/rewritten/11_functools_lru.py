from functools import lru_cache, reduce

@lru_cache(maxsize=None)
def digits(n):
    return 1 if n < 10 else 1 + digits(n // 10)

latencies = [int(x) for x in re.findall(r"latency_ms=(\d+)", context)]
total = reduce(lambda a, b: a + b, latencies, 0)
three_digit = sum(1 for x in latencies if digits(x) == 3)
submit(f"{total} {three_digit}")
# expect: "689265 1357"
