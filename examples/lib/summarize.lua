-- lib/summarize.lua — a child workflow used by nested-workflow.lua.
--
-- It reads its own `args` (given by the caller of workflow()) and reports a table, which
-- becomes the return value of workflow() in the parent.

function main()
  local topic = args.topic or error("summarize.lua needs args.topic")
  local n = args.sentences or 3
  local r = agent{
    name = "summarize " .. topic,
    prompt = "Summarise " .. topic .. " in " .. n .. " sentences.",
  }
  -- A child's error() fails the workflow() call in the parent (its branch, here).
  if not r.ok then error("summarize " .. topic .. ": " .. r.error) end
  report({ topic = topic, summary = r.output })
end
