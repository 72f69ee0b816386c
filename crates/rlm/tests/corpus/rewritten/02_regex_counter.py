import re
from collections import Counter
errors = re.findall(r"\[ERROR\] service=(\w+)", context)
by_service = Counter(errors)
top = by_service.most_common(2)
print(top)
submit(", ".join(f"{svc}={n}" for svc, n in top))
# expect: "billing=38, auth=34"
