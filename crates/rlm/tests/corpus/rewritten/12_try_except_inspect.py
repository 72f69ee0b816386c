# Inspect defensively: bad lines must not stop the scan.
parsed, bad = 0, 0
for line in context.splitlines():
    try:
        ms = int(line.split("latency_ms=")[1].split()[0])
        parsed += 1
    except (IndexError, ValueError) as e:
        bad += 1
codes = sorted({int(c) for c in re.findall(r"code=(\d+)", context)})
text = "parsed {} bad {} codes {}..{}".format(parsed, bad, codes[0], codes[-1])
print(text)
submit(text)
# expect: "parsed 1501 bad 0 codes 100..118"
