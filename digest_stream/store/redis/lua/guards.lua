-- guards.lua: the typed error replies and the argument guards. The Python side validates
-- first (store/validate.py); these refuse the same inputs again, before anything is written.
-- Holds: invalid_argument, invalid_state, parse_number, parse_time, parse_integer, parse_name,
--   parse_topic_id, parse_digest_id, parse_ttl, parse_policy.
-- Needs: DIGEST_ID_LENGTH, MAX_NAME_BYTES, MAX_OFFSET, MAX_TOPIC_ID_BYTES, MAX_TTL (Python).

-- Errors ---------------------------------------------------------------------

local function invalid_argument(message)
    error({err = 'ERR invalid_argument: ' .. message})
end

local function invalid_state(message)
    error({err = 'ERR invalid_state: ' .. message})
end

-- Argument parsing (guards: the Python side validates first) ----------------

local function parse_number(value, name)
    local number = tonumber(value)
    -- tonumber() accepts inf/nan spellings via strtod; refuse them.
    if number == nil or number ~= number or number == math.huge or number == -math.huge then
        invalid_argument(name .. ' must be a finite number, got ' .. tostring(value))
    end
    return number
end

local function parse_time(value, name)
    local number = parse_number(value, name)
    if number < 0 then
        invalid_argument(name .. ' must be >= 0, got ' .. tostring(value))
    end
    return number
end

local function parse_integer(value, name, minimum, maximum)
    local number = parse_number(value, name)
    if number ~= math.floor(number) or number < minimum or number > maximum then
        invalid_argument(name .. ' must be an integer in [' .. minimum .. ', ' .. maximum
            .. '], got ' .. tostring(value))
    end
    return number
end

local function parse_name(value, name)
    if type(value) ~= 'string' or #value == 0 or #value > MAX_NAME_BYTES then
        invalid_argument(name .. ' must be 1..' .. MAX_NAME_BYTES .. ' bytes')
    end
    return value
end

-- A topic id ("" = not known): base64 or hex characters only, so it never holds the '|'
-- that separates it from the offset in the fence.
local function parse_topic_id(value)
    if value == '' then
        return nil
    end
    if type(value) ~= 'string' or #value > MAX_TOPIC_ID_BYTES
            or string.find(value, '[^%w%+/=_%-]') then
        invalid_argument('topic id must be 1..' .. MAX_TOPIC_ID_BYTES
            .. ' base64 or hex characters, got ' .. tostring(value))
    end
    return value
end

local function parse_digest_id(value)
    if type(value) ~= 'string' or #value ~= DIGEST_ID_LENGTH
            or not string.find(value, '^[0-9a-f]+$') then
        invalid_argument('digest id must be ' .. DIGEST_ID_LENGTH
            .. ' lowercase hex characters, got ' .. tostring(value))
    end
    return value
end

local function parse_ttl(value)
    local ttl = parse_time(value, 'ttl')
    if ttl <= 0 then
        invalid_argument('ttl must be > 0, got ' .. tostring(value))
    end
    if ttl > MAX_TTL then
        invalid_argument('ttl must be at most ' .. MAX_TTL .. ' seconds, got ' .. tostring(value))
    end
    return ttl
end

-- The POLICY_WIDTH fields of a policy from args[base] (protocol.POLICY_BLOCK's order).
local function parse_policy(args, base)
    local policy = {
        minimum = parse_time(args[base], 'minimum_delay'),
        increment = parse_time(args[base + 1], 'increment_delay'),
        maximum = parse_time(args[base + 2], 'maximum_delay'),
        ttl = parse_ttl(args[base + 3]),
        -- 0 means "no capacity limit"
        capacity = parse_integer(args[base + 4], 'capacity', 0, MAX_OFFSET),
        -- 0 means "no flush_at"
        flush_at = parse_integer(args[base + 5], 'flush_at', 0, MAX_OFFSET),
    }
    if args[base + 6] ~= '' then
        -- the calendar schedule's next fire time, computed by the caller (no cron in Lua)
        policy.next_fire = parse_time(args[base + 6], 'next fire')
    end
    if policy.ttl <= policy.maximum then
        invalid_argument('ttl (' .. args[base + 3] .. ') must exceed maximum_delay ('
            .. args[base + 2] .. ')')
    end
    return policy
end
