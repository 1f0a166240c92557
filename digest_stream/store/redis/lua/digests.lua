-- digests.lua: opening and closing digests: what ds_open, ds_close and their many-target
-- forms (lua/commands/) share.
-- Holds: timeline_keys (also used by admin commands), digest_reply, open_target, many_targets,
--   new_moves, moves_float, digest_id_and_records, apply_moves, close_target.
-- Needs: CAUSES, FLUSH_AT_FLOOR, OPEN_REPLY, TARGET_WIDTH (Python); invalid_argument,
--   parse_digest_id, parse_name, parse_policies, policy_at (guards); call_tag, digest_key,
--   ready_key, timeline_key, waiting_key (keys); format_digest_meta, format_float,
--   format_timeline_meta, parse_digest_meta, parse_timeline_meta, ttl_ms (encoding);
--   call_chunked, sort_records (helpers); encode_inline, held_count, holds_no_records, META,
--   read_container, read_head, read_meta (containers); write_meta (container_writes).

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

-- A call on several timelines of one partition (KEYS: waiting, ready; ARGV from `first`:
-- the policies, then the targets, TARGET_WIDTH fields each): its tag and its targets as
-- three lists (timelines, digest ids, policies: no table per target), all checked before
-- anything is written.
local function many_targets(keys, args, first)
    local tag = call_tag(keys, 'many')
    local policies, base = parse_policies(args, first)
    if (#args - base + 1) % TARGET_WIDTH ~= 0 then
        invalid_argument('expects ' .. TARGET_WIDTH .. ' fields per target')
    end
    local timelines, ids, target_policies, count = {}, {}, {}, 0
    for at = base, #args, TARGET_WIDTH do
        count = count + 1
        timelines[count] = parse_name(args[at], 'timeline')
        ids[count] = parse_digest_id(args[at + 1])
        target_policies[count] = policy_at(policies, args[at + 2])
    end
    return tag, timelines, ids, target_policies
end

-- The schedule changes of a close call's targets, written once after all of them (one
-- ZREM and one ZADD per set instead of one each per target: nothing a close reads is in
-- these sets).
local function new_moves()
    return {unready = {}, unwait = {}, wait = {}, texts = {}, closed = {}}
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

-- The id and record count of a digest's meta, or nil: what a close checks, read without
-- splitting the whole meta (most of a close's Lua time went to that).
local function digest_id_and_records(digest)
    local raw = read_meta(digest)
    if raw == nil then
        return nil
    end
    local id, records = string.match(raw, '^([^|]*)|[^|]*|[^|]*|(%d*)')
    return id, tonumber(records) or 0
end

local function apply_moves(tag, moves)
    call_chunked('ZREM', ready_key(tag), moves.unready)
    call_chunked('ZREM', waiting_key(tag), moves.unwait)
    call_chunked('ZADD', waiting_key(tag), moves.wait)
end

-- Closes one digest, its schedule change listed in `moves`. Returns 1 when that digest was
-- closed, 0 for an unknown or already closed id, and whether the partition keys' TTL needs
-- a refresh (the timeline waits again).
local function close_target(tag, timeline, digest_id, now, policy, moves)
    local digest = digest_key(tag, timeline)
    local id, records = digest_id_and_records(digest)
    if id ~= digest_id then
        return 0, false
    end
    redis.call('DEL', digest)
    local source = timeline_key(tag, timeline)
    local head = read_head(source)
    if records == 0 and holds_no_records(source, head) then
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
    local next_fire, flush_at = policy.schedule, policy.flush_at -- the schedule's next fire
    local due, soon = next_fire or now + policy.minimum_delay, nil
    -- A flush that came while the digest was open (flush_timeline), or flush_at records that
    -- did (add leaves a READY timeline alone): due right after the floor, not a cool-down later.
    if timeline_meta.cause == CAUSES.flushed then
        soon = CAUSES.flushed
    elseif flush_at > 0 and timeline_meta.written >= flush_at
            and held_count(source, head, timeline_meta.written) >= flush_at then
        soon = CAUSES.flush_at
    end
    if soon ~= nil and now + FLUSH_AT_FLOOR < due then
        due, timeline_meta.cause = now + FLUSH_AT_FLOOR, soon
    else
        timeline_meta.cause = next_fire ~= nil and CAUSES.schedule or CAUSES.cooldown
    end
    if head.kind == 'none' then
        -- Nothing came while it was open (every leading digest's usual close): one write,
        -- of a meta that differs between such closes of one call only by its cause.
        local closed = moves.closed[timeline_meta.cause]
        if closed == nil then
            closed = encode_inline(format_timeline_meta(timeline_meta), {})
            moves.closed[timeline_meta.cause] = closed
        end
        redis.call('SET', source, closed, 'PX', ttl_ms(policy.ttl))
    else
        write_meta(source, head, format_timeline_meta(timeline_meta))
        redis.call('PEXPIRE', source, ttl_ms(policy.ttl))
    end
    moves.unready[#moves.unready + 1] = timeline
    moves.wait[#moves.wait + 1] = moves_float(moves, due)
    moves.wait[#moves.wait + 1] = timeline
    return 1, true
end
