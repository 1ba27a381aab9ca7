-- pipeline-demo.lua — streaming multi-stage processing.
--
-- pipeline(items, stages) moves every item through the stages in order. It streams: an
-- item enters stage 2 as soon as it leaves stage 1, without waiting for the other items.
-- A stage is a function(data, item, index) — `data` is what the previous stage returned
-- (the item itself for stage 1) — or a table {name=..., handler=...}. A stage that raises
-- marks its item failed and skips the item's later stages; `need` below raises when an
-- agent call failed.
--
--   luft run --workflow examples/pipeline-demo.lua

meta = {
  reasoning = "Draft, then critique, then polish each section independently.",
  phases = { { label = "write", description = "a three-stage pipeline per section" } },
}

local sections = { "Introduction", "Design", "Results", "Outlook" }

-- need returns a successful call's output, or raises with the call's error.
local function need(r)
  if not r.ok then error(r.error, 0) end
  return r.output
end

function main()
  phase("write")
  local res = pipeline(sections, {
    { name = "draft", handler = function(title)
        return need(agent{ name = "draft " .. title, prompt = "Draft the section '" .. title .. "'." })
      end },
    { name = "critique", handler = function(draft, title)
        local c = need(agent{ name = "critic " .. title, prompt = "Critique this draft:\n" .. draft })
        return { draft = draft, critique = c }
      end },
    { name = "polish", handler = function(d, title)
        return need(agent{
          name = "editor " .. title,
          prompt = "Polish the draft using the critique.\nDraft: " .. d.draft .. "\nCritique: " .. d.critique,
        })
      end },
  }, { max_inflight = 2 })

  local parts = {}
  for _, item in ipairs(res.items) do
    if item.ok then
      parts[#parts + 1] = "## " .. sections[item.index] .. "\n\n" .. item.output
    else
      parts[#parts + 1] = "## " .. sections[item.index] .. "\n\n(failed: " .. item.error .. ")"
    end
  end
  log(res.ok .. " sections ok, " .. res.failed .. " failed")
  report({ markdown = table.concat(parts, "\n\n") .. "\n" })
end
