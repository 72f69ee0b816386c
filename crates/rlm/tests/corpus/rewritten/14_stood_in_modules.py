heapq = __rlm_mod_heapq
statistics = __rlm_mod_statistics
ascii_lowercase = __rlm_mod_string.ascii_lowercase
textwrap = __rlm_mod_textwrap
itemgetter = __rlm_mod_operator.itemgetter
latencies = [int(x) for x in re.findall(r"latency_ms=(\d+)", context)]
top3 = heapq.nlargest(3, latencies)
mid = statistics.median(latencies)
spread = round(statistics.pstdev(latencies), 1)
letters = sum(1 for ch in context[:2000] if ch in ascii_lowercase)
by_service = {}
for line in context.splitlines():
    svc = line.split("service=")[1].split()[0]
    by_service[svc] = by_service.get(svc, 0) + 1
ranked = sorted(by_service.items(), key=itemgetter(1), reverse=True)
summary = textwrap.shorten(f"top {top3} median {mid} spread {spread} letters {letters} busiest {ranked[0][0]}", 80)
submit(summary)
# expect: "top [900, 900, 898] median 460 spread 252.9 letters 919 busiest auth"
