-- add.lua: the steps of ds_add (lua/commands/ds_add.lua), the one command that stores
-- records (and applies a batch's controls), once add_args.lua has read its arguments.
-- Holds: read_schedule, begin_timelines, write_back, advance_fence, add_applied, add_run,
--   fresh_timelines, add_with_controls.
-- Needs: CAUSES (Python); quiet_until (guards); CONTROL_HANDLERS (controls); batches
--   (batches); call_chunked, call_listed, write_fence (helpers); digest_key, ready_key,
--   waiting_key (keys); float_text, format_float, format_timeline_meta, meta_last_delivery,
--   number_of (encoding); snoozes (snoozes); read_head (containers);
--   last_delivery_of, mark_cause, store_batch (container_writes); lead (leading);
--   new_timeline (add_args); zadd_batch (digests); apply_early, apply_record (record_rules).

-- ds_add, in four steps: parse_add checks the whole call, begin_timelines reads the
-- state of every timeline the batch touches and apply_record runs the state machine
-- record by record (in memory), write_back stores each touched timeline once, and
-- advance_fence moves the fence.

-- The schedule state of `names`, one ZMSCORE per set for all of them: per name, whether it is
-- READY (ready[i] ~= false) and, when not, its due time (due[i], nil: not WAITING).
local function read_schedule(tag, names)
    local ready = call_listed('ZMSCORE', ready_key(tag), names)
    local waiting_names, at, count = {}, {}, 0
    for i = 1, #names do
        if ready[i] == false then
            count = count + 1
            waiting_names[count], at[count] = names[i], i
        end
    end
    local waiting, due, numbers = call_listed('ZMSCORE', waiting_key(tag), waiting_names), {}, {}
    for j = 1, count do
        if waiting[j] ~= false then
            due[at[j]] = number_of(numbers, waiting[j])
        end
    end
    return ready, due
end

-- Step 2a, for the timelines the batch touches: each one's state (READY, WAITING with a
-- due time, cooling, or absent) and its container's head, read once for the whole batch.
-- Nothing is written before write_back (but a cooled-down leftover's removal), so the reads
-- are made together, one command per kind of read for all the timelines (ZMSCORE, MGET)
-- instead of several per timeline: with one record per timeline, those calls were most of
-- the Lua's time.
-- Cooling: in neither set, its container only the meta a close wrote with nothing pending
-- (close_found). Within its cool-down (now before its last delivery plus minimum_delay) the
-- timeline is WAITING, due when the cool-down ends, as if the close had scheduled it; after
-- it, absent: the meta is a leftover whose TTL has not run out yet, removed here so the
-- timeline starts anew (its next record immediate, led when asked).
local function begin_timelines(tag, touched, names, keys, now, known)
    if #touched == 0 then
        return
    end
    if not known then
        local ready, due = read_schedule(tag, names)
        for i, timeline in ipairs(touched) do
            timeline.ready, timeline.due = ready[i] ~= false, due[i]
        end
    end
    local numbers = {}
    -- the timelines in neither set, for the leading edge's batch form (batches.lua): only
    -- such a timeline can have an index entry that matters (a digest in an open batch makes
    -- it READY once settled, a closed batch's cool-down schedules it), so a timeline that
    -- waits or is READY (the interleaved append) costs the index no lookup
    local absent, absent_names, absent_policies = {}, {}, {}
    for i, timeline in ipairs(touched) do
        if not timeline.ready and timeline.due == nil then
            local n = #absent + 1
            absent[n], absent_names[n], absent_policies[n] = timeline, names[i],
                timeline.policy
        end
    end
    local cooling, settled = batches.settle(tag, absent_names, absent_policies, now, 'add')
    local snoozed = #absent > 0 and snoozes.any(tag)
    for i, timeline in ipairs(absent) do
        if settled[i] then
            timeline.ready = true -- its digest made ordinary (or lost): READY as any
        end
        timeline.cooled_at = cooling[i]
        -- the snooze's end, which an absent timeline waits for instead of being READY
        timeline.snoozed = snoozed and snoozes.end_of(tag, timeline.timeline, now) or nil
    end
    -- the one read of each container's head this batch (write_back writes from it): an
    -- inline container's first bytes only (a list's meta), never its records (a push needs
    -- nothing more: push_entries), and nothing at all when EXISTS finds none of them
    local any = call_chunked('EXISTS', nil, keys) > 0
    for i, timeline in ipairs(touched) do
        -- (a head read already, by append_lane, with nothing written since, is that read)
        local head = timeline.head or any and read_head(timeline.key, true) or {kind = 'none'}
        timeline.head, timeline.batch = head, {}
        local closed_at = timeline.cooled_at
        if closed_at ~= nil and head.kind == 'none' and not timeline.ready
                and timeline.due == nil then
            -- cooling since its batch closed (batches.lua): WAITING until the cool-down ends,
            -- its container made with that last delivery, as the close's meta would hold it
            timeline.due = quiet_until(timeline.policy, closed_at + timeline.policy.minimum_delay,
                now)
            timeline.due_changed = true
            head.meta = format_timeline_meta({written = 0, dropped = 0,
                last_delivery = closed_at, expired = false, behind_open = false,
                cause = CAUSES.cooldown})
        elseif head.kind == 'none' and (timeline.ready or timeline.due ~= nil) then
            -- Scheduled, yet no records: either they are in its open digest (these records
            -- wait behind it), or they expired (or were evicted) with any digest. Marked
            -- either way, so the next digest reports a loss instead of hiding it.
            local open_digest = redis.call('EXISTS', digest_key(tag, timeline.timeline)) == 1
            head.meta = format_timeline_meta({
                written = 0, dropped = 0, expired = not open_digest, behind_open = open_digest,
            })
        end
        if timeline.due == nil and not timeline.ready and head.kind == 'inline'
                and head.blob ~= nil and head.start ~= nil and head.start > #head.blob
                and timeline.policy.schedule == nil then
            -- a meta and nothing else, in no set: cooling, or cooled down
            local last_delivery = meta_last_delivery(head.meta, numbers)
            if last_delivery ~= nil then
                local ends = last_delivery + timeline.policy.minimum_delay
                if now < ends then
                    timeline.due = quiet_until(timeline.policy, ends, now)
                    timeline.due_changed = true
                    timeline.last_delivery = last_delivery
                else
                    redis.call('DEL', timeline.key)
                    timeline.head = {kind = 'none'}
                end
            end
        elseif timeline.due ~= nil and not timeline.ready then
            -- only its last delivery is read here: store_batch parses the meta if it rewrites it
            local last_delivery = meta_last_delivery(head.meta, numbers)
            timeline.last_delivery = last_delivery
                or last_delivery_of(tag, timeline.timeline, {}) -- its open digest's, if any
        end
    end
end

-- Step 3: each touched timeline written once: its records (trimmed to capacity once,
-- after all of them), then its schedule entry. Returns the records dropped and the
-- longest ttl among the timelines (for the partition-level keys).
local function write_back(tag, touched, call)
    local dropped, partition_ttl = 0, call.partition_ttl
    -- nothing below reads the schedule: its entries are written together at the end, one
    -- ZADD per set instead of one per timeline
    local now, became_ready, due_changed, texts = format_float(call.now), {}, {}, {}
    local leading = call.leading
    for _, timeline in ipairs(touched) do
        -- the leading edge (leading.lua): a timeline with no container before this call
        -- gets its digest opened now (READY, nothing pending)
        local led = leading ~= nil and timeline.became_ready and timeline.head.kind == 'none'
            and lead(call, timeline) -- 'batch', 'ordinary' or false
        if not led then
            local lost, written = store_batch(tag, timeline.key, timeline.head, timeline.batch,
                timeline.policy.capacity, call.inline_records, timeline.policy.ttl_ms_text)
            dropped = dropped + lost
            apply_early(tag, timeline, call.now, written)
        end
        if timeline.mark ~= nil and not led then
            mark_cause(timeline.key, timeline.mark)
        end
        if timeline.became_ready then
            if led ~= 'batch' then -- (one in batch form is READY by its index entry)
                became_ready[#became_ready + 1] = now
                became_ready[#became_ready + 1] = timeline.timeline
            end
        elseif timeline.due_changed then
            due_changed[#due_changed + 1] = float_text(texts, timeline.due)
            due_changed[#due_changed + 1] = timeline.timeline
        end
        if timeline.policy.ttl > partition_ttl then
            partition_ttl = timeline.policy.ttl
        end
    end
    zadd_batch(ready_key(tag), became_ready)
    zadd_batch(waiting_key(tag), due_changed) -- new members too: timelines woken from cooling
    return dropped, partition_ttl
end

-- Step 4: the fence only moves forward, and takes the caller's topic id when it had none
-- (a fence written before topic ids, or reset). Returns the fence after the call.
local function advance_fence(tag, fence_before, topic_before, fence, topic)
    local moved = fence > -1 and (fence_before == nil or fence > fence_before)
    local adopted = topic ~= nil and topic_before == nil and fence_before ~= nil
    if moved or adopted then
        write_fence(tag, moved and fence or fence_before, topic or topic_before)
    end
    return moved and fence or fence_before
end

-- Steps 2 and 3 over the records `applied` (in offset order, each above the fence): reads
-- the state of their timelines (`known`: the caller read their schedule state already,
-- read_schedule, and set it on each), runs the state machine and writes each timeline back.
-- Counts into `totals` (but added) and lists what became READY in totals.ready.
local function add_applied(call, applied, totals, known)
    local touched, names, keys, touched_count = {}, {}, {}, 0
    for _, record in ipairs(applied) do
        local timeline = record.timeline
        if not timeline.touched then
            timeline.touched = true
            touched_count = touched_count + 1
            touched[touched_count] = timeline
            names[touched_count] = timeline.timeline
            keys[touched_count] = timeline.key
        end
    end
    begin_timelines(call.tag, touched, names, keys, call.now, known)
    for _, record in ipairs(applied) do
        apply_record(record.timeline, record, totals.ready, call.now)
    end
    if call.urgent then -- (only a batch holding urgent records pays this loop)
        local snoozed
        for _, record in ipairs(applied) do
            local timeline = record.timeline
            if record.urgent then
                timeline.urgent = true
                if timeline.policy.urgent_passes_snooze then
                    if snoozed == nil then
                        snoozed = snoozes.any(call.tag)
                    end
                    if snoozed then
                        snoozes.let_through(call.tag, timeline.timeline, call.now)
                    end
                end
            end
        end
    end
    local dropped, partition_ttl = write_back(call.tag, touched, call)
    totals.dropped = totals.dropped + dropped
    if partition_ttl > totals.partition_ttl then
        totals.partition_ttl = partition_ttl
    end
end

-- Steps 2 and 3 over call.records[first..last] (no control among them): those at or below
-- `fence` are skipped (their schedule state known when call.known: parse_add read it). Counts into `totals` and lists what became READY in totals.ready;
-- returns the fence after them.
local function add_run(call, first, last, fence, totals)
    local records, applied, count = call.records, {}, 0
    for i = first, last do
        local record = records[i]
        if record.offset <= fence then
            totals.skipped = totals.skipped + 1 -- a replay: at or below the fence
        else
            fence = record.offset
            count = count + 1
            applied[count] = record
        end
    end
    totals.added = totals.added + count
    add_applied(call, applied, totals, call.known)
    return fence
end

-- Records of records[first..last] point at a timeline state of their own: a run after a
-- control reads its timelines again (the control changed them in Redis).
local function fresh_timelines(call, records, first, last)
    local fresh = {}
    for i = first, last do
        local record = records[i]
        local timeline = fresh[record.timeline]
        if timeline == nil then
            local old = record.timeline
            timeline = new_timeline(call, old.number, false)
            fresh[old] = timeline
        end
        record.timeline = timeline
    end
end

-- A batch holding controls, in ONE call (so Redis cannot lose part of it and keep the rest):
-- each run of records as a plain add does it, each control with its handler, in offset
-- order, each fenced the same way. Returns the fence after the last.
local function add_with_controls(call, fence, totals)
    local records, done = call.records, 0
    for _, control in ipairs(call.controls) do
        if control.before > done then
            if done > 0 then
                fresh_timelines(call, records, done + 1, control.before)
            end
            fence = add_run(call, done + 1, control.before, fence, totals)
            done = control.before
        end
        if control.offset > fence then
            fence = control.offset
            -- the control's timeline as every path but the close sees it (batches.lua)
            batches.settle(call.tag, {control.timeline}, {control.policy}, call.now, 'full')
            local ready_change, cancelled = CONTROL_HANDLERS[control.code](call.tag,
                control.timeline, control.argument, control.policy, call.now)
            if ready_change == 1 then
                totals.ready[#totals.ready + 1] = control.timeline
            elseif ready_change == -1 then
                -- a cancel took back what a flush of this call made READY: not announced
                for i, listed in ipairs(totals.ready) do
                    if listed == control.timeline then
                        table.remove(totals.ready, i)
                        break
                    end
                end
            end
            totals.cancelled = totals.cancelled + cancelled
        end
    end
    if #records > done then
        if done > 0 then
            fresh_timelines(call, records, done + 1, #records)
        end
        fence = add_run(call, done + 1, #records, fence, totals)
    end
    return fence
end
