import itertools
levels = [line.split()[2].strip("[]") for line in context.splitlines()]
runs = [(k, len(list(g))) for k, g in itertools.groupby(levels)]
longest = max((n for k, n in runs if k == "INFO"), default=0)
pairs = list(itertools.islice(itertools.combinations(["a", "b", "c"], 2), 2))
print(pairs)
submit(f"longest INFO run: {longest}")
# expect: "longest INFO run: 16"
