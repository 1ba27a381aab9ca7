-- nested-workflow.lua — compose workflows.
--
-- workflow(path, args) runs another workflow file inside this run and returns its report.
-- The path is relative to this script's folder. The child gets its own `args` and its own
-- call keys, and shares this run's scheduler, budget and events.
--
--   luft run --workflow examples/nested-workflow.lua

meta = {
  reasoning = "Summarise two topics with a reusable child workflow, then compare.",
  phases = {
    { label = "summaries", description = "the child workflow once per topic" },
    { label = "compare", description = "one agent compares the summaries" },
  },
}

function main()
  phase("summaries")
  local topics = { "SQLite WAL mode", "PostgreSQL MVCC" }
  local summaries = parallel(topics, function(topic)
    return workflow("lib/summarize.lua", { topic = topic, sentences = 2 })
  end)

  phase("compare")
  for i, s in ipairs(summaries) do
    if s.ok == false then error("summary " .. i .. " failed: " .. s.error) end
  end
  local cmp = agent{
    name = "comparer",
    prompt = "Compare:\n1. " .. summaries[1].summary .. "\n2. " .. summaries[2].summary,
  }
  if not cmp.ok then error("the comparison failed: " .. cmp.error) end
  report({ summaries = summaries, comparison = cmp.output })
end
