// Package adapters holds the Backend interface — one agent call in, a result with usage out —
// and its implementations: mock (the offline, deterministic default), mockfile (scripted
// replies from a JSON file) and openai; the acp:* coding agents live in adapters/acp. A
// Registry maps backend ids to instances. Backends know nothing of the journal or the VM;
// they report usage through plain values in agent.Result.
package adapters
