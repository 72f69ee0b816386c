total = len(context.splitlines())
errors = context.count("[ERROR]")
warns = context.count("[WARN]")
line = "%d lines: %d errors (%.1f%%), %s warnings" % (total, errors, 100.0 * errors / total, warns)
print(line)
submit(line)
# expect: "1501 lines: 157 errors (10.5%), 319 warnings"
