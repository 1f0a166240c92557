-- leading_lane.lua: ds_add's common case when it leads (an open nonce, no controls, a timeline
-- in neither set): the call's timelines and records kept in parse_add's lists, not in a table
-- each, as far as they can be.
-- Holds: lead_lane.
-- Needs: quiet_until (guards); batches (batches); call_chunked (helpers); lead_record
--   (leading); new_timeline, record_tables (add_args); add_applied (add).
--
-- At one record per timeline, the shape of a notification system whose keys are mostly
-- quiet, nearly every timeline of a leading add is new: in neither set, no index entry, no
-- container. Such a timeline with one record in the call, out of its quiet hours, is led in
-- the batch form without
-- the state machine's table per timeline and per record (whose making was most of the add's
-- Lua: docs/benchmarks.md). Every other timeline, with its records, takes add_applied's
-- path, exactly as a call without this lane would (its schedule state as parse_add read it).

-- The records above `fence` applied (in order, the running fence as add_run keeps it), their
-- timelines led or stepped as said above. Counts into `totals`; returns the fence after them.
local function lead_lane(call, fence, totals)
    local tag, leading, starts, timeline_count = call.tag, call.leading, call.record_starts,
        call.timeline_count
    local names, policy_of, ready, due = call.names, call.policy_of, call.ready_of, call.due_of
    -- per timeline number, its applied records' count and the first one's number; nil when
    -- record k is timeline k's one record, every one applied (one_each above the fence)
    local count_of, first_of, applied, added
    local offsets = call.record_offsets
    if call.one_each and #offsets > 0 and offsets[1] > fence then
        added, fence = #offsets, call.top_offset
    else
        local of = call.record_timelines
        count_of, first_of, applied, added = {}, {}, {}, 0
        for i = 1, #offsets do
            local offset = offsets[i]
            if offset <= fence then
                totals.skipped = totals.skipped + 1 -- a replay: at or below the fence
            else
                fence = offset
                added = added + 1
                applied[added] = i
                local number = of[i] or i -- (nil: record i names timeline i)
                local count = count_of[number]
                if count == nil then
                    count_of[number], first_of[number] = 1, i
                else
                    count_of[number] = count + 1
                end
            end
        end
    end
    totals.added = totals.added + added
    if added == 0 then
        return fence
    end
    -- new as far as the sets say, with one record and no calendar: the candidates (`listed`
    -- nil while they are timelines 1..count, the common call: no list made)
    local listed, candidate_names, count = nil, names, 0
    for number = 1, timeline_count do
        local records = 1
        if count_of ~= nil then
            records = count_of[number]
        end
        local policy = policy_of[number]
        if records == 1 and ready[number] == false and due[number] == nil
                and policy.schedule == nil
                and quiet_until(policy, call.now, call.now) == call.now then
            count = count + 1
            if listed ~= nil then
                listed[count], candidate_names[count] = number, names[number]
            end
        elseif listed == nil then
            listed, candidate_names = {}, {}
            for j = 1, count do
                listed[j], candidate_names[j] = j, names[j]
            end
        end
    end
    local led, led_count, partition_ttl = {}, 0, totals.partition_ttl
    if count > 0 then
        -- and with no index entry (one in either generation: settled on add_applied's path)
        local entries = batches.index_entries(tag, candidate_names)
        local fresh, keys, prefix, fresh_count = {}, {}, call.key_prefix, 0
        for j = 1, count do
            if entries[j] == false then
                fresh_count = fresh_count + 1
                fresh[fresh_count] = listed and listed[j] or j
                keys[fresh_count] = prefix .. candidate_names[j]
            end
        end
        -- and no container: all of them (a container of any is rare, one EXISTS tells it,
        -- and then all take add_applied's path, which reads each one's head)
        if fresh_count > 0 and call_chunked('EXISTS', nil, keys) == 0 then
            for j = 1, fresh_count do
                local number = fresh[j]
                local policy = policy_of[number]
                lead_record(leading, number, names[number],
                    starts[first_of and first_of[number] or number], policy)
                led[number] = true
                if policy.ttl > partition_ttl then
                    partition_ttl = policy.ttl
                end
            end
            led_count = fresh_count
        end
    end
    totals.partition_ttl = partition_ttl
    if led_count == timeline_count and first_of == nil then
        return fence -- every timeline led (one_each's common case)
    end
    local timelines, stepped = {}, false
    for number = 1, timeline_count do
        if not led[number] and (count_of == nil or count_of[number] ~= nil) then
            timelines[number] = new_timeline(call, number, true)
            stepped = true
        end
    end
    if stepped then
        local of, selected, s = call.record_timelines, {}, 0
        for j = 1, added do
            local i = applied and applied[j] or j -- (one_each: all of them)
            if timelines[of[i] or i] ~= nil then
                s = s + 1
                selected[s] = i
            end
        end
        add_applied(call, record_tables(call, selected, timelines), totals, true)
    end
    if #leading.opened > 1 and (first_of ~= nil or stepped and led_count > 0) then
        -- the lane's and add_applied's digests, listed in the order the timelines' first
        -- applied records come, as one path lists them: by number when record k is timeline
        -- k's (first_of nil), else by that record (a record skipped at or below the fence
        -- may have given a timeline its number)
        table.sort(leading.opened, first_of and function(a, b)
            return first_of[a] < first_of[b]
        end or nil)
    end
    return fence
end
