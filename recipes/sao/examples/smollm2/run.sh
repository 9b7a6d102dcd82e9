#!/usr/bin/env bash
# SAO on SmolLM2, on the CPU: reef serves builtin:smollm2 with the sao recipe (reef.toml); a
# simulated user asks one request at a time, scores the answer (1 if it opens with "Sure", -1
# if not), and reports the score on the answer's receipt with `reef report`.  Each scored rollout
# is one step: its candidate is checked and, if it passes, published as the next release, which
# answers the next request.  Then the release chain, its tags, and a rollback.  (Scored 0 instead
# of -1, a disliked answer is no step until the critic has learned a baseline from a liked one:
# with every value still 0, a score of 0 gives every token an advantage of 0; docs/sao.md.)
#
#   recipes/sao/examples/smollm2/run.sh            # after scripts/setup.sh --dev
#   ROLLOUTS=20 REEF_PORT=8932 recipes/sao/examples/smollm2/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../../../examples.sh" # root, py, reef, example, serve_smollm2
example sao-example 8931
rollouts="${ROLLOUTS:-8}"

echo "reef serves builtin:smollm2 with sao at $url (state and log in $state)"
serve_smollm2 "$port" "$state"

# the tip of the release chain (v1, the base model, appears once the learner has started)
tip() {
  curl -s "$url/reef/scenarios/$scenario/releases" |
    "$py" -c 'import json,sys; r=json.load(sys.stdin)["releases"]; print(r[0]["release"] if r else "")'
}
# the learner's state on the scenario ("stepping" while a step runs)
learning() {
  curl -s "$url/reef/status" | "$py" -c 'import json,sys
rows = [r for r in json.load(sys.stdin)["scenarios"] if r["name"] == sys.argv[1]]
print((rows[0].get("learning") or {}).get("state") if rows else "")' "$scenario"
}
# wait while the learner steps on the report just sent (if it starts one within 2 s)
settle() {
  local state
  for _ in $(seq 40); do
    state=$(learning)
    [ "$state" = stepping ] && break
    sleep 0.05
  done
  while [ "$state" = stepping ]; do
    sleep 0.2
    state=$(learning)
  done
}

curl -sf "$url/reef/scenarios" -H 'content-type: application/json' -d "{\"name\": \"$scenario\"}" >/dev/null
until [ -n "$(tip)" ]; do sleep 0.5; done
requests=("Can you recommend a book about history?" "Could you suggest a recipe for bread?"
  "Can you give me a name for my dog?" "Would you find me a good movie for tonight?"
  "Can you recommend a gift for my sister?" "Could you suggest a song for a road trip?")
for n in $(seq "$rollouts"); do
  request="${requests[$(( (n - 1) % ${#requests[@]} ))]}"
  body=$("$py" -c 'import json,sys; print(json.dumps({"model": "builtin:smollm2", "max_tokens": 8,
    "temperature": 1.0, "seed": int(sys.argv[2]), "messages": [{"role": "user", "content": sys.argv[1]}]}))' \
    "$request" "$n")
  answer=$(curl -s -D "$state/headers" "$url/v1/chat/completions" -H "x-reef-scenario: $scenario" \
    -H 'content-type: application/json' -d "$body")
  receipt=$(tr -d '\r' <"$state/headers" | awk -F': ' 'tolower($1)=="x-reef-agent-record-id" {print $2}')
  text=$(printf '%s' "$answer" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])')
  case "$text" in Sure*) score=1 ;; *) score=-1 ;; esac
  before=$(tip)
  "$reef" report "$scenario" "$receipt" --score="$score" --url "$url" >/dev/null
  settle
  after=$(tip)
  if [ "$after" != "$before" ]; then outcome="one step: $after now serves"; else outcome="not a step; $after serves"; fi
  printf '%2d  score %2s  %-40s  %s\n' "$n" "$score" "$(printf '%s' "$text" | tr '\n' ' ' | cut -c1-40)" "$outcome"
done

echo
"$reef" releases "$scenario" --url "$url"
echo
echo "tags: $(git -C "$repo" tag --list | tr '\n' ' ')"
if [ "$(tip)" != v1 ]; then
  "$reef" rollback "$scenario" v1 --url "$url"
  echo "the base model serves again; the chain keeps every release:"
  git -C "$repo" log --oneline release
fi
