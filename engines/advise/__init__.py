"""`specviz advise`: every oracle and draft model on this machine, ranked for one target before
any run. The target answers a few prompts of each kind once (cached); each candidate is then
predicted on those answers without a speculative run (draft models by `pair`'s teacher-forced
agreement, the copying oracles by replaying their proposals, trained heads by their held-out
acceptance) and priced with this machine's cost profile under auto K's own policy.

prompts.py  the prompt kinds (code, prose, chat, or the person's files)
answers.py  the target's greedy answers, cached per model, backend and prompt set
replay.py   one candidate's proposals replayed on the answers, at a fixed K or with auto K
pricing.py  what a step costs here: the stored profile scaled to forwards timed now
candidates.py  what could draft for the target: the copying oracles, draft models on this
            machine (registry and other tools' stores), trained heads
drafts.py  heads.py  copying.py   each kind of candidate predicted
report.py   the result (a plain dataclass a window can draw), ranking, verdict, text table
advise.py   from a loaded target to the ranked result
"""
