-- leading.lua: the leading edge's digests in flight (an add with an open nonce), and the two
-- commands that end them: ds_settle (published) and ds_reclaim (handed back to delivery).
-- Holds: LEADING_HEAD, leading_records, lead, begin_leading, end_leading, settle,
--   reclaim_one, reclaim.
-- Needs: CAUSES, INLINE_MAX_RECORDS (written from Python); guards, keys, encoding,
--   containers (encode_inline, decode_inline, read_head, distinct_records, store_batch);
--   call_chunked, extend_ttl, refresh_partition_ttl (helpers).
--
-- A timeline an add finds absent gets its first digest in that same add, already in the
-- state its close would leave: no records, cooling down since the add (WAITING until
-- now + minimum_delay). The digest itself (id, records) is returned to the caller, which
-- publishes it, and kept in the partition's leading hash T:l until the caller settles it
-- (the broker acknowledged it: one HDEL) or reclaims it (the publish failed, or the
-- caller is gone: the take-over reclaims every one left). Reclaiming writes it back as the
-- timeline's open digest under the same id and makes the timeline READY, exactly the state
-- an open leaves, so delivery reopens and publishes that very digest: at-least-once with
-- stable ids, for the cost of one SET, one ZADD entry and one hash field per first event.

-- A leading hash value: the policy's ttl (seconds, a double), the timeline name's length,
-- then the name and the inline digest container.
local LEADING_HEAD = '>dH'

-- The records of a timeline's first batch as its digest holds them (a repeated id keeps
-- its first place and its last value, as store_batch does), or nil when the policy's
-- capacity would trim them: that rare timeline takes the path of an open instead.
local function leading_records(timeline)
    local records = distinct_records(timeline.batch)
    local capacity = timeline.policy.capacity
    if capacity > 0 and #records > capacity then
        return nil
    end
    return records
end

-- Gives `timeline` (absent before this add) its leading digest: the closed state written,
-- its due time listed in `due_changed`, the digest kept in call.leading and its open reply
-- listed there. Returns false (nothing written) when the timeline must take an open.
local function lead(call, timeline, due_changed)
    local records = leading_records(timeline)
    if records == nil then
        return false
    end
    local leading, policy, name = call.leading, timeline.policy, timeline.timeline
    leading.count = leading.count + 1
    local id = call.open_nonce .. string.format('%08x', leading.count)
    -- the digest meta format_digest_meta would write: only the id and count vary
    local meta = id .. leading.meta_middle .. format_integer(#records) .. leading.meta_end
    local pending = leading.pending
    pending[#pending + 1] = id
    pending[#pending + 1] = struct.pack(LEADING_HEAD, policy.ttl, #name) .. name
        .. encode_inline(meta, records)
    redis.call('SET', timeline.key, leading.closed_meta, 'PX', policy.ttl_ms_text)
    due_changed[#due_changed + 1] = format_float(call.now + policy.minimum)
    due_changed[#due_changed + 1] = name
    leading.names[name] = true
    -- the caller holds these records: it is told the name and id, not sent them back
    local opened = leading.opened
    opened[#opened + 1] = name
    opened[#opened + 1] = id
    if policy.ttl > leading.ttl then
        leading.ttl = policy.ttl
    end
    return true
end

-- The leading state of an add call (nil: not asked, or a batch holding controls, whose
-- cancels must reach these records: it announces instead).
local function begin_leading(call)
    if call.open_nonce == nil or call.controls ~= nil then
        return nil
    end
    local template = format_digest_meta({id = '', opened_at = call.now, dropped = 0,
        records = 0, expired = false, cause = CAUSES.immediate})
    local middle, last = string.match(template, '^(|[^|]*|[^|]*|)0(|.*)$')
    return {
        count = 0, pending = {}, opened = {}, names = {}, ttl = 0,
        meta_middle = middle, meta_end = last,
        -- the container a close leaves: no records, delivered (cooling down) now
        closed_meta = encode_inline(format_timeline_meta({written = 0, dropped = 0,
            last_delivery = call.now, cause = CAUSES.cooldown}), {}),
    }
end

-- After write_back: keeps the call's leading digests, and leaves their timelines out of
-- the READY list it returns.
local function end_leading(call, totals)
    local leading = call.leading
    if leading == nil or leading.count == 0 then
        return totals.ready, {}
    end
    local key = leading_key(call.tag)
    call_chunked('HSET', key, leading.pending)
    extend_ttl(key, ttl_ms(leading.ttl))
    local ready = {}
    for _, name in ipairs(totals.ready) do
        if not leading.names[name] then
            ready[#ready + 1] = name
        end
    end
    return ready, leading.opened
end

-- KEYS: waiting, ready, leading. ARGV: digest ids.
-- The broker acknowledged these leading digests: they are forgotten. Returns 1 per id
-- still kept, 0 per unknown one (settled or reclaimed before).
local function settle(keys, args)
    local tag = partition_tag_of(keys, leading_key)
    for _, id in ipairs(args) do
        parse_digest_id(id)
    end
    local key, kept = leading_key(tag), {}
    for i, id in ipairs(args) do
        kept[i] = redis.call('HDEL', key, id)
    end
    return kept
end

-- Writes one kept leading digest back as its timeline's open digest (same id), READY since
-- `now` unless it already was; when another digest of the timeline is open meanwhile, its
-- records wait behind that one as pending records instead (a new id will carry them).
local function reclaim_one(tag, value, now, inline_records)
    local ttl, length, position = struct.unpack(LEADING_HEAD, value)
    local name = string.sub(value, position, position + length - 1)
    local blob = string.sub(value, position + length)
    local digest = digest_key(tag, name)
    local ms = ttl_ms(ttl)
    if redis.call('EXISTS', digest) == 1 then
        local _, records = decode_inline(blob)
        local key = timeline_key(tag, name)
        store_batch(tag, key, read_head(key), records, 0, inline_records, format_integer(ms))
        return name, ttl
    end
    redis.call('SET', digest, blob, 'PX', ms)
    redis.call('ZREM', waiting_key(tag), name)
    if redis.call('ZSCORE', ready_key(tag), name) == false then
        redis.call('ZADD', ready_key(tag), format_float(now), name)
    end
    return name, ttl
end

-- KEYS: waiting, ready, leading. ARGV: now, partition_ttl, inline_records, digest ids (none:
-- every one kept). Hands leading digests back to delivery (reclaim_one). Returns the
-- timelines to announce, in order (a timeline twice: once).
local function reclaim(keys, args)
    local tag = partition_tag_of(keys, leading_key)
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local inline_records = parse_integer(args[3], 'inline record limit', 0, INLINE_MAX_RECORDS)
    local key = leading_key(tag)
    local ids, values = {}, {}
    if #args > 3 then
        for i = 4, #args do
            ids[#ids + 1] = parse_digest_id(args[i])
        end
        for i, id in ipairs(ids) do
            values[i] = redis.call('HGET', key, id)
        end
    else
        local flat = redis.call('HGETALL', key)
        for i = 1, #flat, 2 do
            ids[#ids + 1] = flat[i]
            values[#values + 1] = flat[i + 1]
        end
    end
    local announce, seen, longest = {}, {}, partition_ttl
    for i, value in ipairs(values) do
        if value ~= false then
            local name, ttl = reclaim_one(tag, value, now, inline_records)
            if not seen[name] then
                seen[name] = true
                announce[#announce + 1] = name
            end
            longest = math.max(longest, ttl)
        end
    end
    if #announce > 0 then
        call_chunked('HDEL', key, ids)
        refresh_partition_ttl(tag, longest)
    end
    return announce
end
