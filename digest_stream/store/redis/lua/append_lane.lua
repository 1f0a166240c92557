-- append_lane.lua: ds_add's common case once every timeline of the call is scheduled (READY or
-- WAITING), each with its one record of the call: the interleaved append, kept in parse_add's
-- lists, not in a table per timeline and per record.
-- Holds: append_lane.
-- Needs: RECORD_FORMAT (Python); waiting_key (keys); float_text, meta_last_delivery
--   (encoding); prefix_head (containers); append_inline, mark_cause
--   (container_writes); zadd_batch (digests); new_timeline, record_tables (add_args);
--   add_applied, add_run, apply_flush_at (add).
--
-- At twenty events per timeline, interleaved, nearly every record of a call is the only one
-- of its timeline in that call, and the timeline is already scheduled with an inline
-- container: the record is appended (append_inline), its WAITING due time moved as
-- apply_record moves it, and nothing else is made for it. The state machine's tables per
-- timeline, per record and per head were most of that append's Lua (docs/store.md). A timeline
-- the lane cannot take as it is (no container or a short one, a hash, a meta without its last
-- delivery, past a limit) takes add_applied's path, exactly as a call without this lane would.

-- Applies the call's records above `fence`, every timeline READY or WAITING (call.ready_of,
-- call.due_of). Counts into `totals`; returns the fence after them. The lane itself takes the
-- call when record k is timeline k's one record, every one above the fence (call.one_each);
-- any other call (a replay, a timeline named twice) takes add_run's tables as a whole.
local function append_lane(call, fence, totals)
    local offsets = call.record_offsets
    if not call.one_each or #offsets == 0 or offsets[1] <= fence then
        local timelines, all = {}, {}
        for number = 1, call.timeline_count do
            local name = call.names[number]
            timelines[number] = new_timeline(call.policy_of[number], name,
                call.key_prefix .. name, number, call.ready_of[number] ~= false,
                call.due_of[number])
        end
        for i = 1, #offsets do
            all[i] = i
        end
        call.records = record_tables(call, all, timelines)
        return add_run(call, 1, #call.records, fence, totals)
    end
    local tag, names, policy_of = call.tag, call.names, call.policy_of
    local ready_of, due_of, prefix = call.ready_of, call.due_of, call.key_prefix
    local packed, starts, unpack, now = call.records_arg, call.record_starts, struct.unpack,
        call.now
    local inline_records = call.inline_records
    local due_changed, texts, numbers, changed = {}, {}, {}, 0
    local rest, rest_count, partition_ttl = nil, 0, totals.partition_ttl
    for number = 1, call.timeline_count do
        local policy, key = policy_of[number], prefix .. names[number]
        local ready = ready_of[number] ~= false
        local head = prefix_head(key)
        local last_delivery, written
        -- an inline container longer than its head (a shorter one is read whole: the general
        -- path writes it with one SET), and for a WAITING timeline its last delivery
        if head and head.kind == 'inline' and head.blob == nil and head.meta ~= nil then
            if ready or policy.schedule ~= nil then
                last_delivery = true -- not read: a READY or calendar due time does not move
            else
                last_delivery = meta_last_delivery(head.meta, numbers)
            end
        end
        if last_delivery ~= nil then
            local _, id, timestamp, _, payload = unpack(RECORD_FORMAT, packed, starts[number])
            written = append_inline(key, head,
                {{id = id, timestamp = timestamp, payload = payload}}, policy.capacity,
                inline_records, policy.ttl_ms_text)
        end
        if not written then
            rest_count = rest_count + 1
            rest = rest or {}
            rest[rest_count] = number
        else
            if not ready and policy.schedule == nil then
                local due = due_of[number]
                local moved = math.min(due + policy.increment_delay,
                    last_delivery + policy.maximum_delay)
                if policy.flush_at > 0 and written >= policy.flush_at then
                    -- (rare) flush_at's own rule, on a timeline table of its own
                    local timeline = new_timeline(policy, names[number], key, number, false,
                        moved)
                    timeline.head, timeline.last_delivery = head, last_delivery
                    apply_flush_at(timeline, now, written)
                    if timeline.mark ~= nil then
                        mark_cause(key, timeline.mark)
                    end
                    moved = timeline.due
                end
                if moved ~= due then
                    due_changed[changed + 1] = float_text(texts, moved)
                    due_changed[changed + 2] = names[number]
                    changed = changed + 2
                end
            end
            if policy.ttl > partition_ttl then
                partition_ttl = policy.ttl
            end
        end
    end
    totals.added = totals.added + call.timeline_count
    totals.partition_ttl = partition_ttl
    zadd_batch(waiting_key(tag), due_changed)
    if rest ~= nil then
        local timelines = {}
        for _, number in ipairs(rest) do
            local name = names[number]
            timelines[number] = new_timeline(policy_of[number], name, prefix .. name, number,
                ready_of[number] ~= false, due_of[number])
        end
        add_applied(call, record_tables(call, rest, timelines), totals, true)
    end
    return call.top_offset
end
