import asyncio
lines = context.splitlines()
parts = [lines[i:i + 500] for i in range(0, len(lines), 500)]

async def count(part):
    r = await __rlm_async_llm_query("How many ERROR lines are in this log excerpt?\n" + "\n".join(part))
    return int(r["result"])

results = await __rlm_aio_gather(*[count(p) for p in parts])
tasks = [__rlm_async_llm_query("How many ERROR lines are in this log excerpt?\n" + "\n".join(p)) for p in parts]
again = await __rlm_aio_gather(*tasks)
assert [int(a["result"]) for a in again] == results
submit(str(sum(results)))
# expect: "157"
