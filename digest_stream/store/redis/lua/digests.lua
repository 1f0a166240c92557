-- digests.lua: opening and closing digests: what ds_open, ds_close and their many-target
-- forms (lua/commands/) share.
-- Holds: timeline_keys (also used by admin commands), digest_reply, open_target, str_byte,
--   str_find, redis_call, redis_pcall, msgpack_pack (also used by leading),
--   bind_call_functions (also used by leading),
--   many_targets, new_moves, moves_float, digest_is, zadd_batch (also used by add),
--   apply_moves, closing_writes, close_found, close_target.
-- Needs: CAUSES, COOLING_MARGIN, DIGEST_ID_LENGTH, FLUSH_AT_FLOOR, MAX_NAME_BYTES, OPEN_REPLY,
--   TARGET_FORMAT (Python); quiet_until (guards); META, encode_inline, held_count,
--   holds_no_records, read_container, read_head, read_meta (containers); call_chunked,
--   refresh_partition_ttl, sort_records (helpers); call_tag, digest_key, ready_key,
--   timeline_key, waiting_key (keys); format_digest_meta, format_float, format_integer,
--   format_timeline_meta, parse_digest_meta, parse_timeline_meta, ttl_ms (encoding);
--   invalid_argument, parse_digest_id, parse_integer, parse_name, parse_policies, unpacked
--   (guards); write_meta (container_writes).

-- The tag and timeline of a timeline-level call (its first argument: the timeline).
local function timeline_keys(keys, args)
    local timeline = parse_name(args[1], 'timeline')
    return call_tag(keys, 'timeline', timeline), timeline
end

local function digest_reply(tag, meta, records)
    local flat, n = {}, 0
    for _, record in ipairs(sort_records(tag, records, true)) do
        flat[n + 1], flat[n + 2], flat[n + 3] = record.id, format_float(record.timestamp),
            record.payload
        n = n + 3
    end
    return {
        [OPEN_REPLY.id] = meta.id, [OPEN_REPLY.opened_at] = format_float(meta.opened_at),
        [OPEN_REPLY.dropped] = meta.dropped, [OPEN_REPLY.records] = flat,
        [OPEN_REPLY.expired] = meta.expired and 1 or 0,
        [OPEN_REPLY.cause] = meta.cause
            or (meta.last_delivery ~= nil and CAUSES.cooldown or CAUSES.immediate),
    }
end

-- Opens (or reopens) one READY timeline's digest; nil when the timeline is not READY (nothing
-- written). Returns {id, opened_at, dropped, {id, timestamp, payload, ...} newest first,
-- expired, cause}: expired is 1 when the timeline was scheduled but its earlier records had
-- expired; cause is the letter saying why the timeline was due.
local function open_target(tag, timeline, digest_id, now, policy)
    if redis.call('ZSCORE', ready_key(tag), timeline) == false then
        return nil
    end
    local digest = digest_key(tag, timeline)
    local existing = parse_digest_meta(read_meta(digest))
    if existing ~= nil then
        -- Reopen: the very same digest, whatever was added since stays pending. Its
        -- TTL restarts: a digest nobody manages to close must not expire meanwhile.
        redis.call('PEXPIRE', digest, ttl_ms(policy.ttl))
        return digest_reply(tag, existing, read_container(digest).records)
    end

    local source = timeline_key(tag, timeline)
    local expired = false
    if redis.call('EXISTS', source) == 1 then
        redis.call('RENAME', source, digest)
    else
        -- READY with neither records nor a digest: its data expired (or was evicted).
        expired = true
        redis.call('DEL', digest) -- a meta-less leftover, if any
    end
    local container = read_container(digest)
    local meta = parse_timeline_meta(container.meta)
    local present = #container.records + container.damaged_count
    -- Records the timeline should hold but does not: evicted or removed payloads.
    local missing = math.max(0, meta.written - present) + container.damaged_count
    local digest_meta = {
        id = digest_id,
        opened_at = now,
        dropped = meta.dropped + missing,
        records = #container.records,
        last_delivery = meta.last_delivery,
        -- records that waited behind a digest that is gone: it expired with its records
        expired = expired or meta.expired or meta.behind_open,
        -- why it is due; before causes were recorded: immediate unless delivered before
        cause = meta.cause or (meta.last_delivery ~= nil and CAUSES.cooldown or CAUSES.immediate),
    }
    if container.kind == 'hash' then
        call_chunked('HDEL', digest, container.damaged)
        redis.call('HSET', digest, META, format_digest_meta(digest_meta))
    else
        redis.call('SET', digest, encode_inline(format_digest_meta(digest_meta), container.records))
    end
    redis.call('PEXPIRE', digest, ttl_ms(policy.ttl))
    return digest_reply(tag, digest_meta, container.records)
end

-- The library functions a close, a many-target call or the leading edge uses per target,
-- as upvalues: a global function costs two table reads per use (about 200 instructions),
-- and the library's load cannot read them (bind_call_functions, at each such call, does).
-- (Lua 5.1 allows 200 locals at the library's top level: these are the hot ones only.)
local str_byte, str_find, redis_call, redis_pcall, msgpack_pack

local function bind_call_functions()
    str_byte, str_find = string.byte, string.find
    redis_call, redis_pcall, msgpack_pack = redis.call, redis.pcall, cmsgpack.pack
end

-- A call on several timelines of one partition (KEYS: waiting, ready; ARGV from `first`:
-- the policies, then its targets as ONE packed argument, TARGET_FORMAT each: policy index,
-- timeline, digest id): its tag and its targets as three lists (timelines, digest ids,
-- policies: no table per target), all checked before anything is written; `ids_later`: the
-- caller checks the ids itself (close_many: only those that are not their digest's),
-- before it writes.
local function many_targets(keys, args, first, ids_later)
    bind_call_functions()
    local tag = call_tag(keys, 'many')
    local policies, base = parse_policies(args, first)
    if #args ~= base then
        invalid_argument('expects the targets as one packed argument after the policies')
    end
    local packed, timelines, ids, target_policies = args[base], {}, {}, {}
    unpacked(function()
        local unpack, position, size, count = struct.unpack, 1, #packed, 0
        while position <= size do
            local index, timeline, id
            index, timeline, id, position = unpack(TARGET_FORMAT, packed, position)
            -- the guards' checks inline, their errors by them (a table lookup: nil unless
            -- an integer in 1..#policies)
            local policy = policies[index]
            if policy == nil then
                parse_integer(index, 'policy index', 1, #policies)
            end
            if #timeline == 0 or #timeline > MAX_NAME_BYTES then
                parse_name(timeline, 'timeline')
            end
            if not ids_later and (#id ~= DIGEST_ID_LENGTH or not str_find(id, '^[0-9a-f]+$')) then
                parse_digest_id(id)
            end
            count = count + 1
            timelines[count], ids[count], target_policies[count] = timeline, id, policy
        end
    end, 'targets')
    return tag, timelines, ids, target_policies
end

-- The schedule changes of a close call's targets, written once after all of them (one
-- ZREM and one ZADD per set instead of one each per target: nothing a close reads is in
-- these sets).
-- `partition_ttl`: the call's; the partition keys' TTL is refreshed once, by apply_moves, to
-- the longest of it and the TTLs of the policies whose timeline waits again (`refresh`).
local function new_moves(partition_ttl)
    bind_call_functions()
    return {unready = {}, unwait = {}, wait = {}, cooled = {}, texts = {}, closed = {},
        partition_ttl = partition_ttl, refresh = nil}
end

-- `number` formatted once per call (close times and due times repeat across its targets).
local function moves_float(moves, number)
    local text = moves.texts[number]
    if text == nil then
        text = format_float(number)
        moves.texts[number] = text
    end
    return text
end

-- Whether the digest `digest` is `digest_id`'s (an id is hex: no '|'), and whether it
-- holds records: what a close checks, from the digest's first 64 bytes in ONE command
-- (GETRANGE: a missing key reads as ""; the bounds as text: a number argument is formatted
-- on every call). A read costs Redis about 10 instructions per byte returned: reading every
-- target's digest in one MGET cost more than a GETRANGE each (as did deleting them in one
-- DEL, which needs the call to remember which timelines it closed). The usual meta, after
-- a str8 msgpack header (0xd9, its length), is read in place: its id compared, then its
-- record count (after the opened_at and dropped fields) told zero or not by its first
-- digit. Any other (a hash digest answers WRONGTYPE, fields past those bytes, a count that
-- starts with 0) is read by its kind (read_meta) and matched, without splitting the whole
-- meta (most of a close's Lua time went to that).
local function digest_is(digest, digest_id)
    local prefix = redis_pcall('GETRANGE', digest, '0', '63')
    if type(prefix) ~= 'string' then
        if not str_find(prefix.err, '^WRONGTYPE') then
            error(prefix)
        end
    elseif str_byte(prefix, 1) == 0xd9 then
        -- the meta is prefix[3..stop]: its id field prefix[3..after - 1]; a field that runs
        -- past `limit` (the end of the meta or of what was read) is not read here
        local stop, after, limit = str_byte(prefix, 2) + 2, 3 + #digest_id, #prefix
        if stop < limit then
            limit = stop
        end
        if after <= limit then
            -- the id where the meta starts and a '|' (124) after it (a plain find: no
            -- string made)
            if str_byte(prefix, after) ~= 124 or str_find(prefix, digest_id, 3, true) ~= 3 then
                return false, false
            end
            local bar = str_find(prefix, '|', after + 1, true)
            bar = bar and bar < limit and str_find(prefix, '|', bar + 1, true)
            local digit = bar and bar < limit and str_byte(prefix, bar + 1)
            if digit and digit ~= 48 then -- not '0': 1 to 9 ('1' 49, '9' 57), or no digit
                return true, digit >= 49 and digit <= 57
            end
        end
    end
    local raw = read_meta(digest)
    local id, records = nil, nil
    if raw ~= nil then
        id, records = string.match(raw, '^([^|]*)|[^|]*|[^|]*|(%d*)')
    end
    return id == digest_id, (tonumber(records or '') or 0) > 0
end

-- ZADD of `pairs` (score, member, ...: each member once) into `key`, a schedule set. Redis
-- before 7.2 makes a new set compact (a listpack) whatever the ZADD holds, and finds each
-- new member's place in it by a scan from the front until it holds 128 (Redis's default
-- zset-max-listpack-entries): O(n²). So a batch of more than 128 members, which ends a
-- skiplist anyway, makes the set one first: a member no timeline can be (longer than
-- MAX_NAME_BYTES) and too long for a listpack (past zset-max-listpack-value, 64 bytes),
-- removed again in the same call (nobody sees it). A smaller batch of one score (a close's
-- due time, an add's READY time) is sent in descending member order, each one's place the
-- first. A call of 256 closes (or leading timelines) cost about 5k instructions per member
-- less. Lua's string order (strcoll) is not Redis's, which only makes the scan longer.
local function zadd_batch(key, pairs)
    local count = #pairs
    if count > 2 * 128 then
        -- longer than MAX_NAME_BYTES, made of 32-byte pieces (string.rep adds them one by
        -- one)
        local skiplist_member = string.rep('~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~',
            math.floor(MAX_NAME_BYTES / 32) + 1)
        redis.call('ZADD', key, '0', skiplist_member)
        call_chunked('ZADD', key, pairs)
        redis.call('ZREM', key, skiplist_member)
        return
    end
    local score = pairs[1]
    for i = 3, count - 1, 2 do
        if pairs[i] ~= score then
            score = nil -- strings are compared by identity: any other score ends it
            break
        end
    end
    if score ~= nil and count > 2 then
        local members = {}
        for i = 2, count, 2 do
            members[#members + 1] = pairs[i]
        end
        table.sort(members)
        for i = 1, #members do
            pairs[count + 2 - 2 * i] = members[i]
        end
    end
    call_chunked('ZADD', key, pairs)
end

local function apply_moves(tag, moves)
    -- Every closed timeline is READY, unless maintenance moved it back to WAITING because its
    -- close took long: a cooling one must leave WAITING too (that stale due time would
    -- announce an empty digest and retire it mid cool-down), which only the ZREM's count
    -- tells, so the common close pays no ZREM of WAITING.
    local unready = moves.unready
    if call_chunked('ZREM', ready_key(tag), unready) < #unready then
        call_chunked('ZREM', waiting_key(tag), moves.cooled)
    end
    call_chunked('ZREM', waiting_key(tag), moves.unwait)
    zadd_batch(waiting_key(tag), moves.wait)
    if moves.refresh ~= nil then
        refresh_partition_ttl(tag, math.max(moves.refresh, moves.partition_ttl))
    end
end

-- What a close of a timeline that holds nothing writes (the usual close of a leading
-- digest: nothing came while it was open), the same for every such target of a policy in
-- one call (kept on the call's policy table): the closed meta as an inline container, its
-- TTLs in ms and a calendar's due time (texts: a number argument of redis.call is formatted
-- on every call). With no container, neither a flush nor flush_at can have come while the
-- digest was open: the cause is the cool-down's (or the schedule's). A meta differs between
-- the policies of a call only by its cause: made once per cause.
-- A calendar's timeline waits for its next fire (`due`); a cool-down policy's cools in no
-- set (no `due`, see close_found), the closed meta kept `closed_ttl`: the cool-down and
-- COOLING_MARGIN, within the policy's TTL.
local function closing_writes(policy, now, moves)
    local next_fire = policy.schedule -- the schedule's next fire
    local cause = next_fire ~= nil and CAUSES.schedule or CAUSES.cooldown
    local meta = moves.closed[cause]
    if meta == nil then
        meta = encode_inline(format_timeline_meta({written = 0, dropped = 0,
            last_delivery = now, expired = false, behind_open = false, cause = cause}), {})
        moves.closed[cause] = meta
    end
    local ttl, closed_ttl, due = format_integer(ttl_ms(policy.ttl)), nil, nil
    if next_fire ~= nil then
        closed_ttl, due = ttl, moves_float(moves, next_fire)
    else
        closed_ttl = format_integer(ttl_ms(math.min(policy.ttl,
            policy.minimum_delay + COOLING_MARGIN)))
    end
    local writes = {meta = meta, ttl = ttl, closed_ttl = closed_ttl, due = due}
    policy.closing = writes
    return writes
end

-- Closes `timeline`'s digest (key `digest`), which digest_is found to be the target's, its
-- schedule change listed in `moves` (apply_moves writes them). Returns 1 when that digest
-- was closed, 0 when an earlier target of the call closed it already (the same digest
-- twice: the key is gone, nothing else removes a key within a call), and whether the
-- timeline waits again (then its policy's TTL is noted for apply_moves' refresh of the
-- partition keys).
local function close_found(tag, timeline, digest, holds_records, now, policy, moves)
    if redis_call('DEL', digest) == 0 then
        return 0, false
    end
    local source = timeline_key(tag, timeline)
    if holds_records then
        -- Nothing came while it was open (every leading digest's usual close): no container,
        -- so one write, made only where none is (NX), without reading first; a container
        -- there is read and rewritten below. With a cool-down, nothing is scheduled: the
        -- timeline cools in no set, its meta the only trace (an add within the cool-down
        -- schedules it from the meta's last delivery, add.lua's cooling; once it is over, the
        -- timeline is new again), so a quiet timeline costs no schedule move, open and
        -- retirement when its cool-down ends.
        local writes = policy.closing or closing_writes(policy, now, moves)
        if redis_call('SET', source, writes.meta, 'PX', writes.closed_ttl, 'NX') then
            local unready, wait = moves.unready, moves.wait
            unready[#unready + 1] = timeline
            if writes.due == nil then
                local cooled = moves.cooled -- cooling: in no set (apply_moves)
                cooled[#cooled + 1] = timeline
                return 1, false
            end
            local waiting = #wait
            wait[waiting + 1], wait[waiting + 2] = writes.due, timeline
            moves.refresh = math.max(moves.refresh or 0, policy.ttl)
            return 1, true
        end
    end
    local next_fire = policy.schedule -- the schedule's next fire (held by quiet hours)
    local due = next_fire or quiet_until(policy, now + policy.minimum_delay, now)
    local head = read_head(source)
    if not holds_records and holds_no_records(source, head) then
        -- An empty digest ends the cool-down: retire, the next event is immediate.
        if head.kind ~= 'none' then
            redis.call('DEL', source)
        end
        moves.unready[#moves.unready + 1] = timeline
        moves.unwait[#moves.unwait + 1] = timeline
        return 1, false
    end
    local timeline_meta = parse_timeline_meta(head.meta)
    timeline_meta.last_delivery = now
    timeline_meta.behind_open = false -- that digest is closed: nothing waits behind it
    local flush_at, soon = policy.flush_at, nil
    -- A flush that came while the digest was open (flush_timeline), an urgent record
    -- (apply_early), or flush_at records that did (add leaves a READY timeline alone): due
    -- right after the floor, not a cool-down later.
    if timeline_meta.cause == CAUSES.flushed or timeline_meta.cause == CAUSES.urgent then
        soon = timeline_meta.cause
    elseif flush_at > 0 and timeline_meta.written >= flush_at
            and held_count(source, head, timeline_meta.written) >= flush_at then
        soon = CAUSES.flush_at
    end
    local floor = now + FLUSH_AT_FLOOR
    if soon == CAUSES.flush_at then
        floor = quiet_until(policy, floor, now) -- a flush passes quiet hours: someone asked
    end
    if soon ~= nil and floor < due then
        due, timeline_meta.cause = floor, soon
    else
        timeline_meta.cause = next_fire ~= nil and CAUSES.schedule or CAUSES.cooldown
    end
    write_meta(source, head, format_timeline_meta(timeline_meta))
    redis.call('PEXPIRE', source, (policy.closing or closing_writes(policy, now, moves)).ttl)
    moves.unready[#moves.unready + 1] = timeline
    moves.wait[#moves.wait + 1] = moves_float(moves, due)
    moves.wait[#moves.wait + 1] = timeline
    moves.refresh = math.max(moves.refresh or 0, policy.ttl)
    return 1, true
end

-- Closes one digest (close_found): 0 for an unknown or already closed id.
local function close_target(tag, timeline, digest_id, now, policy, moves)
    local digest = digest_key(tag, timeline)
    local matches, holds_records = digest_is(digest, digest_id)
    if not matches then
        return 0, false
    end
    return close_found(tag, timeline, digest, holds_records, now, policy, moves)
end
