-- hello.lua — the smallest useful workflow.
--
-- A workflow script holds only control flow; agents do the work. luft runs the top-level
-- code first (define `meta` and functions there), then calls main().
--
--   luft run --workflow examples/hello.lua
--   luft run --workflow examples/hello.lua --args '{"name": "Ada"}'

-- meta is optional: it tells people (and the progress view) what the run will do.
meta = {
  reasoning = "One agent writes a greeting; the script reports it.",
  phases = { { label = "greet", description = "ask one agent for a greeting" } },
}

function main()
  phase("greet")

  -- `args` holds the --args JSON; it is an empty table when none was given.
  local who = args.name or "world"

  -- agent{} runs one sub-agent to completion and returns a result table:
  -- ok, status, output, text, tokens, usage, cost, attempts, backend, model, ...
  -- It raises an error when the call fails, so a failure stops the run unless caught.
  local r = agent{
    name = "greeter",
    prompt = "Write a one-line greeting for " .. who .. ".",
  }

  log("the greeter used " .. r.tokens .. " tokens")

  -- report() sets the run's result (the last call wins). A table is printed as JSON.
  report({ greeting = r.output, tokens = r.tokens })
end
