# Chunk the log, ask a sub-model per chunk in one batch, add the answers up.
lines = context.splitlines()
print(f"{len(lines)} lines, {len(context):,} chars")
chunk_size = 200
chunks = ["\n".join(lines[i:i + chunk_size]) for i in range(0, len(lines), chunk_size)]
prompts = [f"How many ERROR lines are in this log excerpt? Answer with a number.\n\n{c}" for c in chunks]
answers = llm_query_batched(prompts)["result"]
counts = []
for a in answers:
    m = re.search(r"\d+", a)
    counts.append(int(m.group()) if m else 0)
print("per chunk:", counts)
submit(str(sum(counts)))
# expect: "157"
