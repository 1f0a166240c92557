-- record_rules.lua: ds_add's state machine in memory, one record at a time (apply_record,
-- with schedule_record for a calendar), and after a timeline's records the rules that make it
-- due early (apply_early: flush_at, urgent records); add.lua runs them, append_lane.lua the
-- early rules for its rare full timeline.
-- Holds: schedule_record, apply_early, apply_record.
-- Needs: CAUSES, FLUSH_AT_FLOOR (Python); quiet_until (guards); digest_key (keys);
--   format_timeline_meta, parse_timeline_meta (encoding); held_count (containers).

-- A record of a timeline on a calendar schedule: no leading edge, and a due time the
-- records do not move. The first one (absent -> WAITING) waits for the next fire.
local function schedule_record(timeline)
    if timeline.due ~= nil then
        return
    end
    timeline.due = timeline.policy.schedule -- its next fire time
    timeline.due_changed = true
    if timeline.head.kind == 'none' then
        -- the container is new: its first write carries the cause
        timeline.head.meta = format_timeline_meta({written = 0, dropped = 0,
            cause = CAUSES.schedule})
    else
        timeline.mark = CAUSES.schedule -- written after the records (write_back)
    end
end

-- After a timeline's records are written, the rules that make it due before its cool-down
-- ends (or its calendar fires), never sooner than FLUSH_AT_FLOOR after its last delivery, so
-- that a burst is one digest per floor, the rest in the next one:
-- - flush_at: a WAITING timeline holding flush_at records is due now;
-- - urgent (timeline.urgent: an urgent record of this call, the caller's judgement by its
--   policy's urgent_when; or a record that pushed out the due time an urgent one set, the
--   meta's cause, its last letter, still URGENT): a WAITING timeline is due now, through its
--   cool-down or calendar; records behind an open digest keep URGENT as their cause, which
--   its close honours (close_found); a READY timeline not opened yet needs nothing (its open
--   takes everything pending).
-- flush_at first: when both hold, the cause is FLUSH_AT, unless quiet hours hold flush_at's
-- due time and not the urgent one.
local function apply_early(tag, timeline, now, written)
    local flush_at, meta = timeline.policy.flush_at, timeline.head.meta
    local full = flush_at > 0 and not timeline.ready and timeline.due ~= nil
        and written >= flush_at
    -- pushed to: `written` counts entries, superseded ones included (push_entries)
    if full and timeline.head.appended
            and held_count(timeline.key, timeline.head, written) < flush_at then
        full = false
    end
    local urgent = timeline.urgent or timeline.due_changed and not timeline.ready
        and meta ~= nil and string.sub(meta, -1) == CAUSES.urgent
    if not (full or urgent) then
        return
    end
    if timeline.ready then -- (urgent only: a READY timeline is never full)
        local cause = parse_timeline_meta(meta).cause
        if cause ~= CAUSES.flushed and cause ~= CAUSES.urgent
                and redis.call('EXISTS', digest_key(tag, timeline.timeline)) == 1 then
            timeline.mark = CAUSES.urgent
        end
        return
    end
    local due = now
    if timeline.last_delivery ~= nil then
        due = math.max(now, timeline.last_delivery + FLUSH_AT_FLOOR)
    end
    -- flush_at's due time is held by quiet hours, an urgent record's is not (it is urgent):
    -- when both hold, the earlier wins, FLUSH_AT on a tie (the model: _flush_at, then _urgent).
    -- Increments keep pushing a full timeline's due time out and flush_at pulls it back: the
    -- cause is rewritten only when it changes.
    local wanted
    if full then
        local held = quiet_until(timeline.policy, due, now)
        if held < timeline.due then
            timeline.due, wanted = held, CAUSES.flush_at
        end
    end
    if urgent and timeline.due ~= nil and due < timeline.due then
        timeline.due, wanted = due, CAUSES.urgent
    end
    if wanted ~= nil then
        timeline.due_changed = true
        if parse_timeline_meta(meta).cause ~= wanted then
            timeline.mark = wanted
        end
    end
end

-- Step 2b, the state machine, one record at a time (as if added one by one):
--   READY   -> READY    delivery is already on its way
--   WAITING -> WAITING  due = min(due + increment, last_delivery + maximum),
--                       or min(due, timestamp) with no last delivery known
--   absent  -> READY    listed in `ready` (immediately ready), or WAITING until the quiet
--                       hours that hold `now` end (no leading edge then); snoozed: WAITING,
--                       due at the snooze's end (not held by quiet hours)
-- Every due time set is held to the end of the quiet hours it falls in (quiet_until).
local function apply_record(timeline, record, ready, now)
    local batch = timeline.batch
    batch[#batch + 1] = record
    if timeline.ready then
        return
    end
    if timeline.policy.schedule ~= nil then
        schedule_record(timeline)
        return
    end
    if timeline.due == nil and timeline.snoozed ~= nil then
        -- snoozed: WAITING until the snooze's end, exactly (the recipient chose that time)
        timeline.due, timeline.due_changed = timeline.snoozed, true
        return
    elseif timeline.due == nil then
        local held = quiet_until(timeline.policy, now, now)
        if held ~= now then
            timeline.due, timeline.due_changed = held, true
            return
        end
        timeline.ready = true
        timeline.became_ready = true
        ready[#ready + 1] = timeline.timeline
        return
    end
    local due
    if timeline.last_delivery ~= nil then
        local policy = timeline.policy
        due = math.min(timeline.due + policy.increment_delay,
            timeline.last_delivery + policy.maximum_delay)
    else
        due = math.min(timeline.due, record.timestamp)
    end
    due = quiet_until(timeline.policy, due, now)
    if due ~= timeline.due then
        timeline.due = due
        timeline.due_changed = true
    end
end
