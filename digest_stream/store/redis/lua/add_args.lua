-- add_args.lua: reading ds_add's packed arguments (its timelines, records and controls),
-- every one checked before anything is written.
-- Holds: new_timeline, parse_timelines, parse_records, parse_controls.
-- Needs: CONTROL_CODES, CONTROL_FORMAT, MAX_NAME_BYTES, MAX_OFFSET, RECORD_FORMAT,
--   TIMELINE_FORMAT (Python); invalid_argument, parse_integer, parse_name, parse_time,
--   unpacked (guards); timeline_key (keys); format_integer (encoding).

-- ds_add takes its timelines, its records and its controls each as ONE packed argument
-- (TIMELINE_FORMAT, RECORD_FORMAT and CONTROL_FORMAT, declared in store/redis/protocol.py):
-- one argument per record field cost the client more than the Lua did (ds_open_many and
-- ds_close_many take their targets the same way: many_targets, digests.lua).

-- A timeline of an add call: its own state and its (shared) policy, not a copy of the
-- policy's values (at one record per timeline, every per-timeline field is per-record
-- work). The state fields add and begin_timelines set are made here, so the table is
-- allocated at its final size once.
local function new_timeline(policy, timeline, key, number)
    return {
        timeline = timeline, key = key, policy = policy, number = number, ready = false,
        due_changed = false, became_ready = false, head = false, batch = false, touched = false,
    }
end

-- The timelines of an add call (one packed argument): each with its policy (parsed once
-- per distinct policy) and key. As in parse_records, the checks run inline (at one record
-- per timeline this loop runs once per record) and the parse_* helpers only raise the error.
local function parse_timelines(packed, tag, policies)
    local timelines, seen, count = {}, {}, 0
    local unpack, prefix = struct.unpack, timeline_key(tag, '') -- each key: prefix .. name
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
            timelines[count] = new_timeline(policy, name, prefix .. name, count)
        end
    end, 'timelines')
    return timelines
end

-- The records of an add call (one packed argument), each pointing at its timeline.
-- Per record, the checks run inline and the parse_* helpers only raise the error:
-- this loop is the one part of the library that runs once per record.
local function parse_records(packed, timelines, through_offset)
    local records, count = {}, 0
    -- the loop's library functions and limits as locals: read once per call, not per record
    local unpack, huge, last = struct.unpack, math.huge, through_offset or MAX_OFFSET
    unpacked(function()
        local position, size = 1, #packed
        while position <= size do
            local start, index, id, timestamp, offset, payload = position
            index, id, timestamp, offset, payload, position =
                unpack(RECORD_FORMAT, packed, position)
            -- a table lookup: nil unless an integer in 1..#timelines
            local timeline = timelines[index]
            if timeline == nil then
                parse_integer(index, 'timeline index', 1, #timelines)
            end
            local length = #id
            if length == 0 or length > MAX_NAME_BYTES then
                parse_name(id, 'record id')
            end
            if not (timestamp >= 0 and timestamp < huge) then
                parse_time(timestamp, 'record timestamp')
            end
            -- an integer (a whole double: `% 1` is an operator, math.floor a call) up to the
            -- through offset; else the precise error
            if not (offset >= 0 and offset <= last) or offset % 1 ~= 0 then
                parse_integer(offset, 'offset', 0, MAX_OFFSET)
                invalid_argument('record offset ' .. format_integer(offset)
                    .. ' is past through_offset ' .. format_integer(through_offset))
            end
            count = count + 1
            records[count] = {
                timeline = timeline,
                id = id,
                timestamp = timestamp,
                offset = offset,
                payload = payload,
                start = start, -- its place in the argument (a leading batch keeps it: batches.lua)
            }
        end
    end, 'records')
    return records
end

-- The control operations of an add call (one packed argument, in order): each with the
-- number of records before it, so the call applies both in their offset order, and its
-- timeline's policy (one of `policies`: a cancel may put back the timeline's cool-down).
local function parse_controls(packed, record_count, through_offset, policies)
    local controls, previous = {}, 0
    unpacked(function()
        local position, size = 1, #packed
        while position <= size do
            local before, offset, code, index, timeline, id
            before, offset, code, index, timeline, id, position =
                struct.unpack(CONTROL_FORMAT, packed, position)
            parse_integer(before, 'records before a control', previous, record_count)
            previous = before
            parse_integer(offset, 'offset', 0, through_offset or MAX_OFFSET)
            local operation = CONTROL_CODES[code]
            if operation == nil then
                invalid_argument('unknown control operation code: ' .. tostring(code))
            end
            parse_name(timeline, 'timeline')
            controls[#controls + 1] = {
                before = before, offset = offset, operation = operation, timeline = timeline,
                policy = policies[parse_integer(index, 'policy index', 1, #policies)],
                id = operation == 'cancel' and parse_name(id, 'record id') or nil,
            }
        end
    end, 'controls')
    return controls
end

