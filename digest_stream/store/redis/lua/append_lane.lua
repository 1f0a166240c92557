-- append_lane.lua: ds_add's common case once every timeline of the call is scheduled (READY or
-- WAITING), each with its one record of the call: the interleaved append, kept in parse_add's
-- lists, not in a table per timeline and per record.
-- Holds: append_lane.
-- Needs: CAUSES, FLUSH_AT_FLOOR, RECORD_FORMAT (Python); quiet_until (guards); waiting_key
--   (keys); float_text, meta_last_delivery (encoding); entry_of, mark_cause, push_entries
--   (container_writes); zadd_batch (digests); new_timeline, record_tables (add_args);
--   add_applied (add); apply_early (record_rules).
--
-- At twenty events per timeline, interleaved, nearly every record of a call is the only one
-- of its timeline in that call, and the timeline is already scheduled with a list container
-- (containers.lua): the record is pushed (RPUSHX: a string, a hash or no container answers
-- otherwise), its TTL set again, its WAITING due time moved as apply_record moves it (its
-- last delivery read off the list's meta, LINDEX), and nothing else is made for it. The state
-- machine's tables per timeline, per record and per head were most of that append's Lua
-- (docs/store.md). A timeline the lane cannot take as it is (no list, a meta without its last
-- delivery, past a limit: the push taken back) takes add_applied's path, exactly as a call
-- without this lane would. A call that is not one record per timeline never comes here
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
    local rest, rest_count, partition_ttl = nil, 0, totals.partition_ttl
    local first = 1
    while first <= call.timeline_count and offsets[first] <= fence do
        first = first + 1 -- a replay: at or below the fence
    end
    totals.skipped = totals.skipped + first - 1
    for number = first, call.timeline_count do
        local policy, key = policy_of[number], prefix .. names[number]
        -- a timeline whose due time the record moves (WAITING, no calendar) needs its last
        -- delivery: its list's meta (a missing key answers false, a string or a hash an
        -- error; each takes the state machine's path); any other is pushed to, if a list
        local moves = ready_of[number] == false and policy.schedule == nil
        local takes, last_delivery, raw, written = true, nil, nil, false
        if moves then
            raw = redis.pcall('LINDEX', key, '0')
            last_delivery = type(raw) == 'string' and meta_last_delivery(raw, numbers) or nil
            takes = last_delivery ~= nil
        end
        if takes then
            local _, id, timestamp, _, payload = unpack(RECORD_FORMAT, packed, starts[number])
            written = push_entries(key, moves and 'RPUSH' or 'RPUSHX', policy.capacity,
                inline_records, policy.ttl_ms_text,
                entry_of({id = id, timestamp = timestamp, payload = payload}))
        end
        if not written then
            rest_count = rest_count + 1
            rest = rest or {}
            rest[rest_count] = number
        else
            if moves then
                local due = due_of[number]
                local moved = quiet_until(policy, math.min(due + policy.increment_delay,
                    last_delivery + policy.maximum_delay), now)
                if policy.flush_at > 0 and written >= policy.flush_at then
                    -- (rare) flush_at's own rule, on a timeline table of its own
                    local timeline = new_timeline(call, number, true)
                    timeline.due, timeline.last_delivery = moved, last_delivery
                    timeline.head = {kind = 'inline', list = true, meta = raw, appended = true}
                    apply_early(tag, timeline, now, written)
                    if timeline.mark ~= nil then
                        mark_cause(key, timeline.mark)
                    end
                    moved = timeline.due
                end
                if string.sub(raw, -1) == CAUSES.urgent then
                    -- an urgent record set its due time (the meta's cause, its last letter,
                    -- is still URGENT): the floor holds it (apply_early)
                    moved = math.min(moved, math.max(now, last_delivery + FLUSH_AT_FLOOR))
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
        local timelines = {}
        for _, number in ipairs(rest) do
            timelines[number] = new_timeline(call, number, true)
        end
        add_applied(call, record_tables(call, rest, timelines), totals, true)
    end
    return call.top_offset
end
