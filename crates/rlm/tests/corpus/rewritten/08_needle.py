# Look for the needle cheaply first, then confirm with a sub-model on the one window that has it.
hits = [i for i, line in enumerate(context.splitlines()) if "passphrase" in line.lower()]
print("hits:", hits)
lines = context.splitlines()
window = "\n".join(lines[max(0, hits[0] - 2):hits[0] + 3])
answer = llm_query(f"Find the passphrase in this text and answer with it only.\n\n{window}")
submit(answer["result"])
# expect: "amber-falcon-42"
