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
  report({ topic = topic, summary = r.output })
end
