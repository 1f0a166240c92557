-- guards.lua: the typed error replies and the argument guards. The Python side validates
-- first (store/validate.py); these refuse the same inputs again, before anything is written.
-- Holds: invalid_argument, invalid_state, parse_number, parse_time, parse_integer, parse_name,
--   parse_topic_id, parse_digest_id, parse_nonce, parse_ttl, parse_count, POLICY_READERS,
--   quiet_until, POLICY_WIDTH, parse_policy, parse_policies, unpacked.
-- Needs: DIGEST_ID_LENGTH, MAX_NAME_BYTES, MAX_OFFSET, MAX_TOPIC_ID_BYTES, MAX_TTL,
--   OPEN_NONCE_LENGTH, POLICY_FIELDS (Python).

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

-- A call's nonce ("" or nil = none; `name` says whose): OPEN_NONCE_LENGTH lowercase hex
-- characters (an add's leading edge, a schedule call's re-send).
local function parse_nonce(value, name)
    if value == nil or value == '' then
        return nil
    end
    if #value ~= OPEN_NONCE_LENGTH or not string.match(value, '^[0-9a-f]+$') then
        invalid_argument(name .. ' must be ' .. OPEN_NONCE_LENGTH
            .. ' lowercase hex characters')
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

-- Policies: the one packed form of every command (store/redis/policy_wire.py). POLICY_FIELDS
-- (written from Python's declaration, store/policy.py) lists each packed option's name and
-- the guard that reads it, in their order; a parsed policy holds each under its name.

-- A count of records: 0 means unset (no capacity limit, no flush_at).
local function parse_count(value, name)
    return parse_integer(value, name, 0, MAX_OFFSET)
end

-- The reader of each kind of packed option (Kind.packed in store/policy.py); the readers
-- only it uses are local to it (the library's top-level locals are near Lua's limit).
local POLICY_READERS = {time = parse_time, ttl = parse_ttl, count = parse_count}
do
    -- A calendar schedule, as its next fire time computed by the caller (no cron in Lua); ""
    -- (nil once parsed) without a schedule.
    local function parse_fire(value, name)
        if value == '' then
            return nil
        end
        return parse_time(value, name)
    end

    -- Quiet hours, as the windows the caller computed (no time zones in Lua): "from,to,..."
    -- in order, each [from, to) a window a due time this call sets can fall in; "" (nil
    -- once parsed) without quiet hours or with none ahead.
    local function parse_quiet(value, name)
        if value == '' then
            return nil
        end
        local windows, count = {}, 0
        for bound in string.gmatch(value, '[^,]+') do
            local at = parse_time(bound, name)
            if count > 0 and at <= windows[count] then
                invalid_argument(name .. ' windows must be in order, got ' .. value)
            end
            count = count + 1
            windows[count] = at
        end
        if count % 2 == 1 then
            invalid_argument(name .. ' must be from,to pairs, got ' .. value)
        end
        return windows
    end

    -- Yes or no: "1" or "0".
    local function parse_flag(value, name)
        if value ~= '1' and value ~= '0' then
            invalid_argument(name .. ' must be 1 or 0, got ' .. tostring(value))
        end
        return value == '1'
    end

    POLICY_READERS.fire, POLICY_READERS.quiet = parse_fire, parse_quiet
    POLICY_READERS.flag = parse_flag
end

-- When a timeline due at `due` (seen at `now`: a due time past is due now) may go out: the
-- end of the quiet window it falls in, else `due` (TimelinePolicy.quiet_until in Python).
local function quiet_until(policy, due, now)
    local windows = policy.quiet_hours
    if windows == nil then
        return due
    end
    local at = math.max(due, now)
    for i = 1, #windows, 2 do
        if at < windows[i] then
            return due
        elseif at < windows[i + 1] then
            return windows[i + 1]
        end
    end
    return due
end

local POLICY_WIDTH = #POLICY_FIELDS

-- The POLICY_WIDTH fields of one policy from args[base], checked alone and across fields.
local function parse_policy(args, base)
    local policy = {}
    for i = 1, POLICY_WIDTH do
        local field = POLICY_FIELDS[i]
        policy[field[1]] = POLICY_READERS[field[2]](args[base + i - 1], field[1])
    end
    -- The rules across options, in TimelinePolicy's order (store/policy.py).
    if policy.ttl <= policy.maximum_delay then
        invalid_argument('ttl (' .. policy.ttl .. ') must exceed maximum_delay ('
            .. policy.maximum_delay .. ')')
    end
    if policy.minimum_delay > policy.maximum_delay then
        invalid_argument('minimum_delay (' .. policy.minimum_delay
            .. ') must not exceed maximum_delay (' .. policy.maximum_delay .. ')')
    end
    if policy.capacity > 0 and policy.flush_at > policy.capacity then
        invalid_argument('flush_at (' .. policy.flush_at .. ') must not exceed capacity ('
            .. policy.capacity .. ')')
    end
    return policy
end

-- A call's table of policies from args[base]: their count, then each one's fields. Returns
-- the policies and the index of the argument after them.
local function parse_policies(args, base)
    local count = parse_integer(args[base], 'policy count', 0, #args)
    if #args < base + count * POLICY_WIDTH then
        invalid_argument('expects ' .. POLICY_WIDTH .. ' fields per policy')
    end
    local policies = {}
    for i = 1, count do
        policies[i] = parse_policy(args, base + 1 + (i - 1) * POLICY_WIDTH)
    end
    return policies, base + 1 + count * POLICY_WIDTH
end

-- Runs `decode` (which walks a packed argument with struct.unpack); a packed argument
-- that ends early or holds too little is refused as one, the guards' own errors pass.
local function unpacked(decode, what)
    local ok, err = pcall(decode)
    if not ok then
        -- pcall hands a guard's error({err = ...}) back as its "ERR ..." string; a struct
        -- error is a plain message ("<script>: bad argument ...")
        if type(err) == 'table' then
            error(err)
        elseif type(err) == 'string' and string.sub(err, 1, 4) == 'ERR ' then
            error({err = err})
        end
        invalid_argument('malformed ' .. what)
    end
end
