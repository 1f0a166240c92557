-- batches.lua: the leading edge's batch form. The new timelines one add leads with a single
-- record each keep their first digests in ONE key per add (the batch) instead of a key each,
-- each timeline pointing at its digest in the partition's index (timeline -> digest id), and
-- the broker's acknowledgement closes them all in one write (ds_close_leading): the batch
-- closed, every timeline of it cools down from that time, with no write per timeline. The
-- close is the one reader of the batch form: whatever else touches such a timeline (an add, a
-- control, open, close, delete, maintenance) settles it first, which turns its digest into the
-- ordinary open digest ds_open leaves, so every other path sees one kind of open digest.
-- Holds: batches (one table: the library's top level is near Lua's 200 locals): settle,
--   index_view, forget, nonce_in_use, index_entries, leading_ready_count, batch_digests_key,
--   and for batch_writes.lua the layout (BATCH_HEAD, INDEX_SENTINEL, the keys),
--   read_batch_head and dissolve.
-- Needs: CAUSES, COOLING_MARGIN, KEY_SUFFIXES, OPEN_NONCE_LENGTH, RECORD_FORMAT, STATES,
--   TIMELINE_FORMAT (Python); invalid_state (guards); digest_key, ready_key, timeline_key
--   (keys); format_digest_meta, format_float, format_integer, format_timeline_meta, ttl_ms
--   (encoding); call_chunked, call_listed, extend_ttl (helpers); encode_inline (containers);
--   LEADING_NUMBER_FORMAT (leading).
--
-- Keys per partition tag T (docs/store.md, The leading edge):
--   T:i, T:j     hash    the index: timeline -> digest id (the batch's nonce and the
--                        timeline's number in its add), the current generation and the
--                        previous one (rotate_index)
--   T:g          hash    since: when T:i started; idead / jdead: after it, no batch an
--                        entry of that generation names can exist
--   T:b          zset    the open batches: nonce -> the time their add opened them
--   T:n:<nonce>  string  a batch: BATCH_HEAD, then one I4 per timeline of the add (the
--                        position of its one record in the records, 0: not in batch form),
--                        the add's packed timelines and its packed records
--   T:x:<nonce>  list    the timelines of that add whose digest is an ordinary one (led
--                        with several records, or settled since) or gone (deleted while
--                        the batch was open): its close closes each by id
-- An entry means: its batch open, the timeline is READY with that digest open; closed, the
-- timeline cools down from the close (in no set, as close_found leaves one), until the
-- policy's minimum_delay; its batch gone, or cooled down: nothing (the entry is a leftover).

local batches = {}
do
    -- The batch's head: state ('o' open, 'c' closed), opened_at (open) or the close's time,
    -- its digests still in batch form, the digests its add led, its timelines, the length of its
    -- packed timelines.
    local BATCH_HEAD = '>c1dI4I4I4I4'
    -- longer than hash-max-listpack-value (64 bytes): see write_batch (a literal: the
    -- library's load cannot call string functions)
    local INDEX_SENTINEL = '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~'
    local BATCH_HEAD_SIZE = 25
    local BATCH_HEAD_LAST = '24'

    local BATCH_INFIX = ':' .. KEY_SUFFIXES.batch .. ':'
    local BATCH_DIGESTS_INFIX = ':' .. KEY_SUFFIXES.batch_digests .. ':'
    local INDEX_SUFFIX = ':' .. KEY_SUFFIXES.index
    local PREVIOUS_INDEX_SUFFIX = ':' .. KEY_SUFFIXES.previous_index
    local GENERATIONS_SUFFIX = ':' .. KEY_SUFFIXES.generations
    local BATCHES_SUFFIX = ':' .. KEY_SUFFIXES.batches

    local function batch_key(tag, nonce) return tag .. BATCH_INFIX .. nonce end
    local function batch_digests_key(tag, nonce) return tag .. BATCH_DIGESTS_INFIX .. nonce end
    local function index_key(tag) return tag .. INDEX_SUFFIX end
    local function previous_index_key(tag) return tag .. PREVIOUS_INDEX_SUFFIX end
    local function generations_key(tag) return tag .. GENERATIONS_SUFFIX end
    local function batches_key(tag) return tag .. BATCHES_SUFFIX end

    -- The head of batch `nonce` ({state, at, formed, led, count, timelines_length}), nil when
    -- it is gone.
    local function read_batch_head(tag, nonce)
        local raw = redis.call('GETRANGE', batch_key(tag, nonce), '0', BATCH_HEAD_LAST)
        if #raw < BATCH_HEAD_SIZE then
            return nil
        end
        local state, at, formed, led, count, timelines_length = struct.unpack(BATCH_HEAD, raw)
        return {nonce = nonce, state = state, at = at, formed = formed, led = led, count = count,
            timelines_length = timelines_length}
    end

    -- Rewrites the count of digests still in batch form (after a settle or a delete took some).
    local function write_batch_count(tag, head)
        redis.call('SETRANGE', batch_key(tag, head.nonce), '9', struct.pack('>I4', head.formed))
    end

    -- The index entries of `names` (digest id or false each) and, per name, whether its entry is
    -- in the previous generation.
    local function index_entries(tag, names)
        local entries = call_listed('HMGET', index_key(tag), names)
        local previous = {}
        if redis.call('EXISTS', previous_index_key(tag)) == 1 then
            local older = call_listed('HMGET', previous_index_key(tag), names)
            for i, entry in ipairs(entries) do
                if entry == false and older[i] ~= false then
                    entries[i], previous[i] = older[i], true
                end
            end
        end
        return entries, previous
    end

    -- The whole batch, read once per call (`head.blob`).
    local function batch_blob(tag, head)
        if head.blob == nil then
            head.blob = redis.call('GET', batch_key(tag, head.nonce))
            if head.blob == false then
                invalid_state('batch ' .. head.nonce .. ' vanished within a call')
            end
        end
        return head.blob
    end

    -- Lists timeline `name` among the ordinary digests of open batch `nonce` (its close closes
    -- each by id, finding a deleted one gone), that list living at least `ms` more.
    local function list_ordinary(tag, nonce, name, ms)
        local digests = batch_digests_key(tag, nonce)
        redis.call('RPUSH', digests, name)
        extend_ttl(digests, ms)
    end

    -- Turns timeline `name`'s digest `digest_id`, in batch form in the open batch `head`, into
    -- the ordinary open digest the leading edge made before batches (its key, its meta: opened
    -- when the add ran, its one record), READY since then, listed among the batch's ordinary
    -- digests (its close closes it by id); its TTL `ms` (a number). The caller removes its index
    -- entry.
    local function materialize(tag, name, digest_id, head, ms)
        local blob = batch_blob(tag, head)
        local number = tonumber(string.sub(digest_id, OPEN_NONCE_LENGTH + 1), 16)
        local position = number and number >= 1 and number <= head.count
            and struct.unpack('>I4', blob, BATCH_HEAD_SIZE + 4 * (number - 1) + 1)
        if not position or position == 0 then
            invalid_state('index entry ' .. digest_id .. ' of ' .. name .. ' names no digest of its batch')
        end
        local records = BATCH_HEAD_SIZE + 4 * head.count + head.timelines_length
        local _, id, timestamp, _, payload = struct.unpack(RECORD_FORMAT, blob, records + position)
        local meta = format_digest_meta({id = digest_id, opened_at = head.at, dropped = 0,
            records = 1, expired = false, cause = CAUSES.immediate})
        redis.call('SET', digest_key(tag, name),
            encode_inline(meta, {{id = id, timestamp = timestamp, payload = payload}}), 'PX',
            format_integer(ms))
        redis.call('ZADD', ready_key(tag), format_float(head.at), name)
        list_ordinary(tag, head.nonce, name, ms)
        head.formed = head.formed - 1
        head.changed = true
    end

    -- What a close leaves of a timeline that held nothing (close_found): its meta alone, cooling
    -- from `closed_at`, expiring with its cool-down (and COOLING_MARGIN) within the TTL; nothing
    -- when that is over by `now`.
    local function cooling_meta(tag, name, closed_at, policy, now)
        local ends = closed_at + math.min(policy.ttl, policy.minimum_delay + COOLING_MARGIN)
        if ends <= now then
            return
        end
        local meta = encode_inline(format_timeline_meta({written = 0, dropped = 0,
            last_delivery = closed_at, expired = false, behind_open = false,
            cause = CAUSES.cooldown}), {})
        redis.call('SET', timeline_key(tag, name), meta, 'PX', ttl_ms(ends - now), 'NX')
    end

    -- Settles what the index says of `names` (policies[i]: each one's policy), before anything
    -- else reads them. An entry whose batch vanished while open (still listed open) leaves
    -- the timeline READY with no digest, in every mode (its open reports the loss).
    -- `before_writing` (optional): called once before the first write. Returns the cooling
    -- times, and which names became READY (settled[i]: a digest made ordinary, or lost). mode 'open' (open, close): a digest in an open batch is materialized, and
    -- nothing else changes. 'add': as 'open', and every entry found goes; the reply holds, per
    -- name in cool-down (a closed batch, within its policy's minimum_delay), the close's time:
    -- the add writes its container with that last delivery (begin_timelines). 'full' (a
    -- control): as 'add', and a timeline in cool-down gets the meta a close writes
    -- (cooling_meta). A leftover entry (its batch gone, or cooled down) goes in 'add' and 'full'.
    local function settle(tag, names, policies, now, mode, before_writing)
        if #names == 0 then
            return {}, {}
        end
        local entries, previous = index_entries(tag, names)
        local heads, cooling, current_gone, previous_gone, changed = {}, {}, {}, {}, {}
        local settled = {}
        local seen = {}
        for i, entry in ipairs(entries) do
            if entry ~= false and not seen[names[i]] then
                seen[names[i]] = true -- a call may name a timeline twice (close_many)
                if before_writing ~= nil then
                    before_writing() -- the caller's last checks: a refused call writes nothing
                    before_writing = nil
                end
                local nonce = string.sub(entry, 1, OPEN_NONCE_LENGTH)
                local head = heads[nonce]
                if head == nil then
                    head = read_batch_head(tag, nonce) or false
                    heads[nonce] = head
                end
                local policy, drop = policies[i], mode ~= 'open'
                local lost = not head and redis.call('ZSCORE', batches_key(tag), nonce)
                if lost then
                    -- its batch vanished while open (evicted, expired): READY with no
                    -- digest, as an ordinary open digest's loss leaves a timeline, so its
                    -- open reports it
                    redis.call('ZADD', ready_key(tag), lost, names[i])
                    drop, settled[i] = true, true
                elseif head and head.state == 'o' then
                    materialize(tag, names[i], entry, head, ttl_ms(policy.ttl))
                    changed[#changed + 1] = head
                    drop, settled[i] = true, true
                elseif head and head.state == 'c' and policy.schedule == nil
                        and now < head.at + policy.minimum_delay then
                    cooling[i] = head.at
                    if mode == 'full' then
                        cooling_meta(tag, names[i], head.at, policy, now)
                    end
                end
                if drop then
                    local gone = previous[i] and previous_gone or current_gone
                    gone[#gone + 1] = names[i]
                end
            end
        end
        call_chunked('HDEL', index_key(tag), current_gone)
        call_chunked('HDEL', previous_index_key(tag), previous_gone)
        for _, head in ipairs(changed) do
            if head.changed then
                head.changed = false
                write_batch_count(tag, head)
            end
        end
        return cooling, settled
    end

    -- The batch-form digests of the batch `head`: {name, digest id} of each timeline whose
    -- record the batch holds.
    local function batch_timelines(tag, head)
        local blob, found = batch_blob(tag, head), {}
        local unpack, position = struct.unpack, BATCH_HEAD_SIZE + 4 * head.count + 1
        for number = 1, head.count do
            local _, name
            _, name, position = unpack(TIMELINE_FORMAT, blob, position)
            if unpack('>I4', blob, BATCH_HEAD_SIZE + 4 * (number - 1) + 1) ~= 0 then
                found[#found + 1] = {name = name, number = number}
            end
        end
        return found
    end

    -- Materializes every digest of the open batch `head` that is still in batch form and for
    -- which `keep(name)` holds (nil: all), its TTL the batch's own; returns how many.
    local function dissolve(tag, head, keep)
        local numbered, names = batch_timelines(tag, head), {}
        for i, timeline in ipairs(numbered) do
            names[i] = timeline.name
        end
        local entries, previous = index_entries(tag, names)
        local ms = redis.call('PTTL', batch_key(tag, head.nonce))
        if ms <= 0 then
            ms = 1000
        end
        local current_gone, previous_gone, count = {}, {}, 0
        for i, timeline in ipairs(numbered) do
            local id = head.nonce .. string.format(LEADING_NUMBER_FORMAT, timeline.number)
            if entries[i] == id and (keep == nil or keep(timeline.name)) then
                materialize(tag, timeline.name, id, head, ms)
                local gone = previous[i] and previous_gone or current_gone
                gone[#gone + 1] = timeline.name
                count = count + 1
            end
        end
        call_chunked('HDEL', index_key(tag), current_gone)
        call_chunked('HDEL', previous_index_key(tag), previous_gone)
        if head.changed then
            head.changed = false
            write_batch_count(tag, head)
        end
        return count
    end

    -- The digests of open batches still in batch form (they are READY, as any open digest).
    local function leading_ready_count(tag)
        local count = 0
        for _, nonce in ipairs(redis.call('ZRANGE', batches_key(tag), 0, -1)) do
            local head = read_batch_head(tag, nonce)
            if head ~= nil and head.state == 'o' then
                count = count + head.formed
            end
        end
        return count
    end

    -- What the index says of `timeline`, without writing (ds_inspect): STATES.ready and its
    -- digest id and opened_at (an open batch), STATES.cooling and its close's time (a closed
    -- one), or nil.
    local function index_view(tag, timeline)
        local entries = index_entries(tag, {timeline})
        local entry = entries[1]
        if entry == false then
            return nil
        end
        local head = read_batch_head(tag, string.sub(entry, 1, OPEN_NONCE_LENGTH))
        if head == nil then
            return nil
        elseif head.state == 'o' then
            return STATES.ready, entry, head.at
        end
        return STATES.cooling, entry, head.at
    end

    -- Whether an add with open nonce `nonce` would lead under a nonce an earlier add led
    -- under (its batch or its ordinary digests' list still stored), which would mix the two
    -- adds' digests: only when a record is above the fence (`top`, the call's highest offset:
    -- a replay of that very add leads nothing and is let through, as any replay).
    local function nonce_in_use(tag, nonce, top, fence)
        if redis.call('EXISTS', batch_key(tag, nonce), batch_digests_key(tag, nonce)) == 0 then
            return false
        end
        return top > (fence or -1)
    end

    -- ds_delete: `timeline`'s index entry goes (a digest in batch form with it: its open batch
    -- counts one fewer and lists the timeline among its ordinary digests, so that the batch's
    -- close reports it not closed instead of counting it in its one write). Returns 1 when its
    -- batch is still there (the digest open, or the timeline cooling since the close), else 0.
    local function forget(tag, timeline)
        local entries = index_entries(tag, {timeline})
        if entries[1] == false then
            return 0
        end
        local head, found = read_batch_head(tag, string.sub(entries[1], 1, OPEN_NONCE_LENGTH)), 0
        if head ~= nil then
            found = 1 -- its digest open, or the timeline cooling since the batch's close
            if head.state == 'o' then
                head.formed = head.formed - 1
                write_batch_count(tag, head)
                local ms = redis.call('PTTL', batch_key(tag, head.nonce))
                list_ordinary(tag, head.nonce, timeline, ms > 0 and ms or 1000)
            end
        end
        redis.call('HDEL', index_key(tag), timeline)
        redis.call('HDEL', previous_index_key(tag), timeline)
        return found
    end

    -- for the ds_* commands
    batches.settle, batches.index_view, batches.forget = settle, index_view, forget
    batches.nonce_in_use, batches.index_entries = nonce_in_use, index_entries
    batches.leading_ready_count, batches.batch_digests_key = leading_ready_count,
        batch_digests_key
    -- for batch_writes.lua
    batches.BATCH_HEAD, batches.INDEX_SENTINEL = BATCH_HEAD, INDEX_SENTINEL
    batches.batch_key, batches.index_key, batches.previous_index_key = batch_key, index_key,
        previous_index_key
    batches.generations_key, batches.batches_key = generations_key, batches_key
    batches.read_batch_head, batches.dissolve = read_batch_head, dissolve
end
