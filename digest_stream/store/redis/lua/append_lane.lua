-- append_lane.lua: ds_add's common case once every timeline of the call is scheduled (READY or
-- WAITING), each with its one record of the call: the interleaved append, kept in parse_add's
-- lists, not in a table per timeline and per record.
-- Holds: append_lane.
-- Needs: RECORD_FORMAT (Python); waiting_key (keys); float_text, meta_last_delivery
--   (encoding); prefix_head (containers); append_inline, mark_cause
--   (container_writes); zadd_batch (digests); new_timeline, record_tables (add_args);
--   add_applied, apply_flush_at (add).
--
-- At twenty events per timeline, interleaved, nearly every record of a call is the only one
-- of its timeline in that call, and the timeline is already scheduled with an inline
-- container: the record is appended (append_inline), its WAITING due time moved as
-- apply_record moves it, and nothing else is made for it. The state machine's tables per
-- timeline, per record and per head were most of that append's Lua (docs/store.md). A timeline
-- the lane cannot take as it is (no container or a short one, a hash, a meta without its last
-- delivery, past a limit) takes add_applied's path, exactly as a call without this lane would,
-- with the head the lane read. A call that is not one record per timeline never comes here
-- (parse_add hands it the tables).

-- Applies the call's records above `fence` (record k is timeline k's only one, at rising
-- offsets: call.one_each; a replay's skipped ones come first), every timeline READY or WAITING
-- (call.ready_of, call.due_of). Counts into `totals`; returns the fence after them.
local function append_lane(call, fence, totals)
    local tag, names, policy_of, offsets = call.tag, call.names, call.policy_of,
        call.record_offsets
    local ready_of, due_of, prefix = call.ready_of, call.due_of, call.key_prefix
    local packed, starts, unpack, now = call.records_arg, call.record_starts, struct.unpack,
        call.now
    local inline_records = call.inline_records
    local due_changed, texts, numbers, changed = {}, {}, {}, 0
    local rest, rest_heads, rest_count, partition_ttl = nil, nil, 0, totals.partition_ttl
    local first = 1
    while first <= call.timeline_count and offsets[first] <= fence do
        first = first + 1 -- a replay: at or below the fence
    end
    totals.skipped = totals.skipped + first - 1
    for number = first, call.timeline_count do
        local policy, key = policy_of[number], prefix .. names[number]
        local head = prefix_head(key)
        -- an inline container longer than its head (a shorter one is read whole: the general
        -- path writes it with one SET), and for a timeline whose due time the record moves
        -- (WAITING, no calendar) its last delivery
        local takes = head and head.kind == 'inline' and head.blob == nil and head.meta ~= nil
        local moves = ready_of[number] == false and policy.schedule == nil
        local last_delivery, written
        if takes and moves then
            last_delivery = meta_last_delivery(head.meta, numbers)
            takes = last_delivery ~= nil
        end
        if takes then
            local _, id, timestamp, _, payload = unpack(RECORD_FORMAT, packed, starts[number])
            written = append_inline(key, head,
                {{id = id, timestamp = timestamp, payload = payload}}, policy.capacity,
                inline_records, policy.ttl_ms_text)
        end
        if not written then
            rest_count = rest_count + 1
            rest, rest_heads = rest or {}, rest_heads or {}
            rest[rest_count], rest_heads[rest_count] = number, head or false
        else
            if moves then
                local due = due_of[number]
                local moved = math.min(due + policy.increment_delay,
                    last_delivery + policy.maximum_delay)
                if policy.flush_at > 0 and written >= policy.flush_at then
                    -- (rare) flush_at's own rule, on a timeline table of its own
                    local timeline = new_timeline(call, number, true)
                    timeline.due, timeline.head, timeline.last_delivery = moved, head,
                        last_delivery
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
    totals.added = totals.added + call.timeline_count - first + 1
    totals.partition_ttl = partition_ttl
    zadd_batch(waiting_key(tag), due_changed)
    if rest ~= nil then
        -- each with the head read above (nothing of it written since): no second read
        local timelines = {}
        for i, number in ipairs(rest) do
            local timeline = new_timeline(call, number, true)
            timeline.head = rest_heads[i]
            timelines[number] = timeline
        end
        add_applied(call, record_tables(call, rest, timelines), totals, true)
    end
    return call.top_offset
end
