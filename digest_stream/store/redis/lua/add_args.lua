-- add_args.lua: reading ds_add's packed arguments (its timelines, records and controls),
-- every one checked before anything is written.
-- Holds: new_timeline, parse_timelines, parse_records, record_tables, parse_controls.
-- Needs: CONTROL_ARGUMENTS, CONTROL_FORMAT, MAX_NAME_BYTES, MAX_OFFSET,
--   RECORD_FORMAT, TIMELINE_FORMAT (Python); format_integer (encoding); invalid_argument, parse_integer,
--   parse_name, parse_time, unpacked (guards).

-- ds_add takes its timelines, its records and its controls each as ONE packed argument
-- (TIMELINE_FORMAT, RECORD_FORMAT and CONTROL_FORMAT, declared in store/redis/protocol.py):
-- one argument per record field cost the client more than the Lua did (ds_open_many and
-- ds_close_many take their targets the same way: many_targets, digests.lua).

-- A timeline of an add call: its own state and its (shared) policy, not a copy of the
-- policy's values (at one record per timeline, every per-timeline field is per-record
-- work). The state fields add and begin_timelines set are made here, so the table is
-- allocated at its final size once. Timeline `number` of `call` (its name and policy from
-- parse_add's lists); `known`: its schedule state as parse_add read it (call.ready_of,
-- call.due_of), else READY false and no due time (begin_timelines reads it).
local function new_timeline(call, number, known)
    local name = call.names[number]
    return {
        timeline = name, key = call.key_prefix .. name, policy = call.policy_of[number],
        number = number, ready = known and call.ready_of[number] ~= false or false,
        due = known and call.due_of[number] or nil, due_changed = false, became_ready = false,
        head = false, batch = false, touched = false,
    }
end

-- The timelines of an add call (one packed argument) as two lists by number: names and
-- policies (each parsed once per distinct policy). No table per timeline: the leading edge's
-- new timelines never need one (leading_lane.lua); the others get theirs from
-- record_tables. As in parse_records, the checks run inline (at one record per timeline this
-- loop runs once per record) and the parse_* helpers only raise the error.
local function parse_timelines(packed, policies)
    local names, policy_of, seen, count = {}, {}, {}, 0
    local unpack = struct.unpack
    unpacked(function()
        local position, size = 1, #packed
        while position <= size do
            local index, name
            index, name, position = unpack(TIMELINE_FORMAT, packed, position)
            local policy = policies[index]
            if policy == nil then
                parse_integer(index, 'policy index', 1, #policies)
            end
            local length = #name
            if length == 0 or length > MAX_NAME_BYTES then
                parse_name(name, 'timeline')
            end
            if seen[name] then
                invalid_argument('timeline listed twice: ' .. name)
            end
            seen[name] = true
            count = count + 1
            names[count], policy_of[count] = name, policy
        end
    end, 'timelines')
    return names, policy_of
end

-- The records of an add call (one packed argument), as the state machine reads them (add.lua)
-- when `timelines` is given (the call's timelines' tables, by number): a table each,
-- {timeline, id, timestamp, offset, payload, start}; else as three lists by record
-- (leading_lane.lua): its timeline's number, its offset and its place in the argument (its
-- payload skipped, cut out only where a path reads it: record_tables, batches.lua). Returns
-- the tables, those lists (`of` holds only the records that do not name the timeline of
-- their own number: of[k] nil is timeline k), the highest offset (-1: none), and whether
-- record k names timeline k, every one of them, at rising offsets (the leading edge's common
-- call: one_each). Per record, the checks run
-- inline and the parse_* helpers only raise the error: this loop is the one part of the
-- library that runs once per record.
local function parse_records(packed, timeline_count, through_offset, timelines)
    local records, of, offsets, starts, count, top = {}, {}, {}, {}, 0, -1
    -- the loop's library functions and limits as locals: read once per call, not per record
    local unpack, huge, last = struct.unpack, math.huge, through_offset or MAX_OFFSET
    -- the lists' form reads up to the payload's length (RECORD_FORMAT without its last c0)
    local format = timelines and RECORD_FORMAT or string.sub(RECORD_FORMAT, 1, -3)
    local one_each = timelines == nil -- so far
    unpacked(function()
        local position, size = 1, #packed
        while position <= size do
            local start, index, id, timestamp, offset, payload = position
            index, id, timestamp, offset, payload, position = unpack(format, packed, position)
            if timelines == nil then
                position = position + payload -- its length
                if position > size + 1 then
                    invalid_argument('malformed records')
                end
            end
            -- an integer in 1..timeline_count (a whole double: `% 1` is an operator)
            if not (index >= 1 and index <= timeline_count) or index % 1 ~= 0 then
                parse_integer(index, 'timeline index', 1, timeline_count)
            end
            local id_length = #id
            if id_length == 0 or id_length > MAX_NAME_BYTES then
                parse_name(id, 'record id')
            end
            if not (timestamp >= 0 and timestamp < huge) then
                parse_time(timestamp, 'record timestamp')
            end
            -- an integer up to the through offset; else the precise error
            if not (offset >= 0 and offset <= last) or offset % 1 ~= 0 then
                parse_integer(offset, 'offset', 0, MAX_OFFSET)
                invalid_argument('record offset ' .. format_integer(offset)
                    .. ' is past through_offset ' .. format_integer(through_offset))
            end
            count = count + 1
            if timelines ~= nil then
                records[count] = {
                    timeline = timelines[index], id = id, timestamp = timestamp,
                    offset = offset, payload = payload,
                    start = start, -- its place (a leading batch keeps it: batches.lua)
                }
            else
                offsets[count], starts[count] = offset, start
                if index ~= count then
                    of[count], one_each = index, false
                elseif offset <= top then
                    one_each = false
                end
            end
            if offset > top then
                top = offset
            end
        end
    end, 'records')
    return records, of, offsets, starts, top, one_each and count == timeline_count
end

-- The records `selected` (numbers among the call's records, in order) as the
-- state machine reads them (add.lua): a table each, {timeline, id, timestamp, offset,
-- payload, start}, its timeline the table of `timelines` (by number).
local function record_tables(call, selected, timelines)
    local records, packed, unpack = {}, call.records_arg, struct.unpack
    local starts = call.record_starts
    for i, number in ipairs(selected) do
        local start = starts[number]
        local index, id, timestamp, offset, payload = unpack(RECORD_FORMAT, packed, start)
        records[i] = {
            timeline = timelines[index], id = id, timestamp = timestamp, offset = offset,
            payload = payload,
            start = start, -- its place in the argument (a leading batch keeps it: batches.lua)
        }
    end
    return records
end

-- The control operations of an add call (one packed argument, in order): each with its
-- code, its argument, the number of records before it, so the call applies both in their
-- offset order, and its timeline's policy (one of `policies`: a cancel may put back the
-- timeline's cool-down).
local function parse_controls(packed, record_count, through_offset, policies)
    local controls, previous = {}, 0
    -- a control's argument as its code's kind says (CONTROL_ARGUMENTS: the kind and what an
    -- error calls it): none (nil), a name, a time (its text, as NewRecord.id carries it)
    local function argument_of(reads, argument)
        if reads[1] == 'name' then
            return parse_name(argument, reads[2])
        elseif reads[1] == 'time' then
            return parse_time(argument, reads[2])
        end
        return nil
    end
    unpacked(function()
        local position, size = 1, #packed
        while position <= size do
            local before, offset, code, index, timeline, argument
            before, offset, code, index, timeline, argument, position =
                struct.unpack(CONTROL_FORMAT, packed, position)
            parse_integer(before, 'records before a control', previous, record_count)
            previous = before
            parse_integer(offset, 'offset', 0, through_offset or MAX_OFFSET)
            local reads = CONTROL_ARGUMENTS[code]
            if reads == nil then
                invalid_argument('unknown control operation code: ' .. tostring(code))
            end
            parse_name(timeline, 'timeline')
            controls[#controls + 1] = {
                before = before, offset = offset, code = code, timeline = timeline,
                policy = policies[parse_integer(index, 'policy index', 1, #policies)],
                argument = argument_of(reads, argument),
            }
        end
    end, 'controls')
    return controls
end

