from dataclasses import dataclass

@dataclass
class Event:
    day: str
    level: str
    service: str

events = []
for line in context.splitlines():
    day, _time, level, service = line.split()[:4]
    events.append(Event(day, level.strip("[]"), service.split("=")[1]))
error_days = {}
for e in events:
    if e.level == "ERROR":
        error_days[e.day] = error_days.get(e.day, 0) + 1
worst_day = max(error_days, key=(lambda *__rlm_a: error_days.get(*__rlm_a)))
print(events[0])
submit(f"{worst_day} ({error_days[worst_day]} errors)")
# expect: "2026-11-05 (34 errors)"
