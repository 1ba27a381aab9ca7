// Package adapters holds the Backend interface — one agent call in, a result with usage out —
// and its implementations: mock (the offline, deterministic default), mockfile (scripted
// replies from a JSON file) and openai (chat completions with the agent's tool loop); the
// acp:* coding agents live in adapters/acp, the tools of openai agents in adapters/tools
// and adapters/mcptools. A Registry maps backend ids to instances.
//
// The rule every backend follows: each model request goes through Call.Do, which the
// runtime turns into an admission by the scheduler (DESIGN decision 3: every turn, not
// every call). The send function Do runs reports the request's usage, response headers
// and error in a TurnReport; an error with StatusCode()/Header() (HTTPError) tells the
// scheduler what happened (429, 5xx, no response), and the scheduler may run the send
// again. A send reads where it goes from its ctx (RouteOf: a replica, a fallback) and a
// streaming backend hands the headers over as soon as they arrive (ObserveHeaders).
//
// Backends know nothing of the journal or the VM; they report usage through plain values
// in agent.Result, progress through Call.Progress, and keep a session's conversation in
// Result.Transcript for the runtime to journal and hand back (Call.Transcript).
package adapters
