-- ds_add: stores a batch of records of one partition (and applies the batch's controls), fenced
-- by offset.
-- KEYS: fence, waiting, ready
-- ARGV: now, partition_ttl, inline_records, expected_fence, through_offset, topic_id,
--   open_nonce, numbering, policies, timelines, records, controls?, urgent?
-- Reply: ready, added, skipped, dropped, fence_before, fence_after, fence_topic, cancelled, led
-- Holds: parse_add, add_refused, add.
-- Needs: ADD_ARGS, ADD_NUMBERING, ADD_REPLY, INLINE_MAX_RECORDS, LIBRARY_VERSION, MAX_OFFSET,
--   RECORD_FORMAT (Python); append_lane (append_lane); POLICY_WIDTH, invalid_argument,
--   parse_integer, parse_nonce, parse_policies, parse_time, parse_topic_id, parse_ttl
--   (guards); add_run, add_with_controls, advance_fence, read_schedule (add); batches
--   (batches); begin_leading, end_leading (leading); call_tag, timeline_key (keys); snoozes
--   (snoozes); format_integer, ttl_ms (encoding); lead_lane (leading_lane); new_timeline,
--   parse_controls, parse_records, parse_timelines, record_tables (add_args); read_fence,
--   refresh_partition_ttl (helpers).
--
-- expected_fence, through_offset, topic_id, open_nonce: "" = none. policies: their count,
-- then POLICY_WIDTH arguments each (parse_policies); a timeline points at its own by index. timelines, records, controls: packed
-- (TIMELINE_FORMAT, RECORD_FORMAT and CONTROL_FORMAT each); controls only when the batch
-- holds any ("" when it holds none but urgent records).
-- urgent: one byte per record, '1' for one the caller found urgent (its policy's
-- urgent_when), '0' else; only when the batch holds any: such a batch takes the tables (no
-- lane), and each urgent record makes its timeline due at once past the floor (add.lua,
-- apply_early).
-- controls: flush | cancel | cancel_all operations among the records, applied at their
-- place (the records before each one first), fenced like records; they count in neither
-- added nor skipped. A batch with controls is one call like any other: all or nothing.
-- expected_fence: the fence the caller left; if the stored one is behind it (or gone),
-- Redis lost writes: nothing is applied and the caller replays from the fence found.
-- through_offset: the batch's last offset; the fence advances to it even for input
-- the caller never handed over (dead letters).
-- topic_id: the id of the topic the records were read from; a fence of another topic
-- (deleted and recreated, renamed, another cluster) does not fence these offsets: nothing
-- is applied and the caller decides (on_state_loss). "" = not known: no check.
-- numbering: ADD_NUMBERING, always (a caller older than library 30 sends none: refused).
-- open_nonce: the leading edge (leading.lua): every timeline this call finds with no
-- container and makes READY gets its digest in this call (id: the nonce and the timeline's
-- number among the call's timelines, in hex) opened, as ds_open would leave it, or in the
-- batch form (batches.lua), instead of being listed as ready; "" = announce. A batch
-- holding controls announces.
-- Reply: the timelines made READY, the records added and skipped (at or below the fence),
-- dropped (capacity), the fence before and after (nil: none), the topic id of the fence
-- found (nil: none), the records cancelled, and led: {number, ...}, the numbers of the
-- timelines led (timeline k's digest id: the nonce and k), each digest holding its
-- timeline's records of this call (the caller has them).

-- Step 1: the whole call, checked before the first write: a refused batch must leave
-- no trace (Redis functions are not rolled back on error).
local function parse_add(keys, args)
    local tag = call_tag(keys, 'add')
    local at = ADD_ARGS
    local call = {
        tag = tag,
        now = parse_time(args[at.now], 'now'),
        partition_ttl = parse_ttl(args[at.partition_ttl]),
        inline_records = parse_integer(args[at.inline_records], 'inline record limit', 0,
            INLINE_MAX_RECORDS),
    }
    if args[at.expected_fence] ~= '' then
        call.expected_fence = parse_integer(args[at.expected_fence], 'expected fence', 0,
            MAX_OFFSET)
    end
    if args[at.through_offset] ~= '' then
        call.through_offset = parse_integer(args[at.through_offset], 'through offset', 0,
            MAX_OFFSET)
    end
    if args[at.numbering] ~= ADD_NUMBERING then
        invalid_argument('add expects its numbering argument "' .. ADD_NUMBERING .. '" (library '
            .. LIBRARY_VERSION .. '): the caller is older than the library')
    end
    call.topic = parse_topic_id(args[at.topic_id])
    -- the leading edge's ("" = not asked): each opened digest's id is it and a number
    call.open_nonce = parse_nonce(args[at.open_nonce], 'open nonce')
    -- the packed timelines follow the policies; then the records
    local policies, packed = parse_policies(args, at.policies)
    -- the controls argument, when sent, holds at least one (a plain add sends none), unless
    -- the urgent records follow it; they hold at least one when sent
    local controls_arg, urgent_arg = args[packed + 2], args[packed + 3]
    if controls_arg == '' then
        controls_arg = nil
    end
    if not (#args == packed + 1 or (#args == packed + 2 and controls_arg ~= nil)
            or (#args == packed + 3 and urgent_arg ~= '')) then
        invalid_argument('add expects ' .. POLICY_WIDTH .. ' fields per policy, then the'
            .. ' packed timelines, the packed records and (optional) the packed controls'
            .. ' and the urgent marks')
    end
    for _, policy in ipairs(policies) do
        -- its containers' TTL as the text Redis reads: a number argument of redis.call is
        -- formatted (%.17g) on every call
        policy.ttl_ms_text = format_integer(ttl_ms(policy.ttl))
    end
    local names, policy_of = parse_timelines(args[packed], policies)
    local prefix = timeline_key(tag, '') -- a timeline's key: it and the name
    call.names, call.policy_of, call.key_prefix, call.timeline_count = names, policy_of,
        prefix, #names
    -- An add without controls reads its timelines' schedule state here (read_schedule, by
    -- number). A leading add with a timeline in neither set (maybe new) takes
    -- leading_lane.lua's lists; one whose timelines are all READY or WAITING, one record each
    -- as its second record suggests (the interleaved append), append_lane.lua's; every other
    -- takes the tables, that state already in them (call.known).
    local ready, due
    if controls_arg == nil then
        ready, due = read_schedule(tag, names)
        call.ready_of, call.due_of, call.known = ready, due, true
        local absent = false
        for number = 1, #names do
            if ready[number] == false and due[number] == nil then
                absent = true
                break
            end
        end
        if urgent_arg ~= nil then
            call.lane = nil -- urgent records: the tables (apply_early), rare enough
        elseif absent and call.open_nonce ~= nil and not snoozes.any(tag) then
            -- (a snoozed absent timeline waits: the tables' path, apply_record)
            call.lane = 'lead'
        elseif not absent and #names > 1 then
            -- record 2 names timeline 2: no record before it shares its timeline (the
            -- caller numbers timelines as its records name them first)
            local records_arg = args[packed + 1]
            local _, _, _, _, length, position = struct.unpack(string.sub(RECORD_FORMAT, 1, -3),
                records_arg, 1)
            if #records_arg >= position + length
                    and struct.unpack('>I4', records_arg, position + length) == 2 then
                call.lane = 'append'
            end
        end
    end
    local function tables()
        local timelines = {}
        for number = 1, #names do
            timelines[number] = new_timeline(call, number, ready ~= nil)
        end
        return timelines
    end
    call.records, call.record_timelines, call.record_offsets, call.record_starts,
        call.top_offset, call.one_each = parse_records(args[packed + 1], #names,
            call.through_offset, not call.lane and tables() or nil)
    -- a leading batch keeps both arguments as they came (batches.lua)
    call.timelines_arg, call.records_arg = args[packed], args[packed + 1]
    if call.lane == 'append' and not call.one_each then
        -- the second record misled: a later one shares a timeline (the tables after all)
        local all = {}
        for i = 1, #call.record_offsets do
            all[i] = i
        end
        call.lane, call.records = nil, record_tables(call, all, tables())
    end
    if controls_arg ~= nil then
        call.controls = parse_controls(controls_arg, #call.records, call.through_offset,
            policies)
    end
    if urgent_arg ~= nil then
        local records = call.records
        if #urgent_arg ~= #records or string.find(urgent_arg, '[^01]') then
            invalid_argument('add expects one urgent mark (0 or 1) per record')
        end
        for number = 1, #records do
            if string.byte(urgent_arg, number) == 49 then -- '1'
                records[number].urgent = true
            end
        end
        call.urgent = true
    end
    return call
end

-- The reply of an add that applied nothing: the fence found is of another topic, or behind
-- the caller's.
local function add_refused(fence_before, topic_before)
    return {
        [ADD_REPLY.ready] = {}, [ADD_REPLY.added] = 0, [ADD_REPLY.skipped] = 0,
        [ADD_REPLY.dropped] = 0, [ADD_REPLY.fence_before] = fence_before or false,
        [ADD_REPLY.fence_after] = fence_before or false,
        [ADD_REPLY.fence_topic] = topic_before or false, [ADD_REPLY.cancelled] = 0,
        [ADD_REPLY.led] = {},
    }
end

local function add(keys, args)
    local call = parse_add(keys, args)
    local tag = call.tag
    local fence_before, topic_before = read_fence(tag)
    if call.topic ~= nil and topic_before ~= nil and topic_before ~= call.topic then
        return add_refused(fence_before, topic_before)
    end
    if call.expected_fence ~= nil
            and (fence_before == nil or fence_before < call.expected_fence) then
        return add_refused(fence_before, topic_before)
    end
    if call.open_nonce ~= nil and call.controls == nil
            and batches.nonce_in_use(tag, call.open_nonce, call.top_offset, fence_before) then
        invalid_argument('open nonce ' .. call.open_nonce .. ' is taken by an earlier add (its digests'
            .. ' are still stored): each add that leads takes a fresh one')
    end
    local totals = {ready = {}, added = 0, skipped = 0, dropped = 0, cancelled = 0,
        partition_ttl = call.partition_ttl}
    call.leading = begin_leading(call, call.timeline_count)
    local fence
    if call.lane == 'lead' then
        fence = lead_lane(call, fence_before or -1, totals)
    elseif call.lane == 'append' then
        fence = append_lane(call, fence_before or -1, totals)
    elseif call.controls == nil then
        fence = add_run(call, 1, #call.records, fence_before or -1, totals)
    else
        fence = add_with_controls(call, fence_before or -1, totals)
    end
    if call.leading ~= nil then
        batches.write_batch(call, call.leading, call.timelines_arg, call.records_arg)
    end
    local fence_after = advance_fence(tag, fence_before, topic_before,
        math.max(fence, call.through_offset or -1), call.topic)
    refresh_partition_ttl(tag, totals.partition_ttl)
    local ready, opened = end_leading(call, totals)
    return {
        [ADD_REPLY.ready] = ready, [ADD_REPLY.added] = totals.added,
        [ADD_REPLY.skipped] = totals.skipped, [ADD_REPLY.dropped] = totals.dropped,
        [ADD_REPLY.fence_before] = fence_before or false,
        [ADD_REPLY.fence_after] = fence_after or false,
        [ADD_REPLY.fence_topic] = topic_before or false,
        [ADD_REPLY.cancelled] = totals.cancelled, [ADD_REPLY.led] = opened,
    }
end
