-- snoozes.lua: a timeline's snooze (the snooze and unsnooze controls): until when nothing of
-- it goes out. One hash per partition, T:z (timeline -> the snooze's end), read only where a
-- timeline would come due: an add making an absent timeline READY (add.lua's apply_record),
-- the schedule's move to READY (ds_schedule) and a flush; the rest of the due rule runs as
-- ever and the snooze holds its result back. A partition without snoozes pays one EXISTS
-- per add (ds_add: the leading lane is not taken when it holds any) and per schedule call.
-- A snooze may end later than `ttl` from now, and a snoozed timeline gets no event for that
-- long: its state (container, schedule entry) would expire in Redis before the end, losing
-- its records with no count. So the state of a snoozed timeline lives until its snooze's end
-- plus `ttl`: set when the snooze is, and kept by every maintenance call (keep_alive) while it
-- lasts, since each add sets the container's TTL to `ttl` again.
-- Holds: snoozes (one table: the library's top level is near Lua's 200 locals): any,
--   end_of, let_through, hold_again, hold_due, set, keep_alive, held, forget.
-- Needs: KEY_SUFFIXES (Python); digest_key, ready_key, timeline_key, waiting_key (keys);
--   format_float, ttl_ms (encoding); extend_ttl, refresh_partition_ttl (helpers).

local snoozes = {}
do
    local SUFFIX = ':' .. KEY_SUFFIXES.snoozes
    local function snoozes_key(tag) return tag .. SUFFIX end
    -- An entry's value: the snooze's end, then PASSING when an urgent record that may pass
    -- it waits (urgent_passes_snooze: let_through); its end and whether one waits.
    local PASSING = ' u'
    local function parse(found)
        local passing = string.sub(found, -2) == PASSING
        return tonumber(passing and string.sub(found, 1, -3) or found), passing
    end
    local function write(tag, timeline, ends, passing)
        redis.call('HSET', snoozes_key(tag), timeline,
            passing and format_float(ends) .. PASSING or format_float(ends))
    end

    -- Whether the partition holds any snooze (one EXISTS).
    function snoozes.any(tag)
        return redis.call('EXISTS', snoozes_key(tag)) == 1
    end

    -- Until when `timeline` is snoozed at `now`, or nil; a snooze that has ended is removed.
    function snoozes.end_of(tag, timeline, now)
        local found = redis.call('HGET', snoozes_key(tag), timeline)
        if found == false then
            return nil
        end
        local ends, passing = parse(found)
        if ends <= now then
            redis.call('HDEL', snoozes_key(tag), timeline)
            return nil
        end
        return ends, passing
    end

    -- An urgent record of `timeline` arrived and its policy lets it pass the snooze (ds_add):
    -- the timeline's next move to READY is not held (hold_due), once. Nothing when the
    -- timeline is not snoozed.
    function snoozes.let_through(tag, timeline, now)
        local ends, passing = snoozes.end_of(tag, timeline, now)
        if ends ~= nil and not passing then
            write(tag, timeline, ends, true)
        end
    end

    -- What let_through let pass is held again (a cancel left nothing pending).
    function snoozes.hold_again(tag, timeline)
        local found = redis.call('HGET', snoozes_key(tag), timeline)
        if found ~= false then
            local ends, passing = parse(found)
            if passing then
                write(tag, timeline, ends, false)
            end
        end
    end

    -- Of the timelines `moved` WAITING -> READY (flat: timeline, due, ...), the snoozed ones
    -- go back to WAITING at their snooze's end (ds_schedule), but for one an urgent record
    -- passes (let_through: it goes, and the snooze holds what follows); returns the others,
    -- as moved.
    function snoozes.hold_due(tag, moved, now)
        if #moved == 0 or not snoozes.any(tag) then
            return moved
        end
        local kept = {}
        for i = 1, #moved, 2 do
            local timeline = moved[i]
            local ends, passing = snoozes.end_of(tag, timeline, now)
            if passing then
                write(tag, timeline, ends, false) -- it passes once
            end
            if ends == nil or passing then
                kept[#kept + 1], kept[#kept + 2] = timeline, moved[i + 1]
            else
                redis.call('ZREM', ready_key(tag), timeline)
                redis.call('ZADD', waiting_key(tag), format_float(ends), timeline)
            end
        end
        return kept
    end

    -- The snooze control (`ends`), or the unsnooze (nil: it ends now): the entry set (an
    -- urgent record let through before is not: the new snooze holds it) or removed; a
    -- WAITING timeline the previous snooze held (due at or after its end) is due at the new
    -- end (now, for an unsnooze), one due sooner than the new end waits for it;
    -- a READY one with no digest open waits for the end (an open digest goes out: it is
    -- under way). Returns 1 when it took a READY timeline back to WAITING.
    function snoozes.set(tag, timeline, ends, now, ttl)
        local key = snoozes_key(tag)
        local previous = redis.call('HGET', key, timeline)
        previous = previous ~= false and parse(previous) or nil
        if ends ~= nil then
            write(tag, timeline, ends, false)
            extend_ttl(key, ttl_ms(ends - now + ttl))
            extend_ttl(timeline_key(tag, timeline), ttl_ms(ends - now + ttl))
            refresh_partition_ttl(tag, ends - now + ttl)
        else
            redis.call('HDEL', key, timeline)
        end
        local due = redis.call('ZSCORE', waiting_key(tag), timeline)
        if due ~= false then
            due = tonumber(due)
            if previous ~= nil and due >= previous then
                due = ends or now
            elseif ends ~= nil and due < ends then
                due = ends
            end
            redis.call('ZADD', waiting_key(tag), format_float(due), timeline)
            return 0
        end
        if ends ~= nil and redis.call('ZSCORE', ready_key(tag), timeline) ~= false
                and redis.call('EXISTS', digest_key(tag, timeline)) == 0 then
            redis.call('ZREM', ready_key(tag), timeline)
            redis.call('ZADD', waiting_key(tag), format_float(ends), timeline)
            return 1
        end
        return 0
    end

    -- Every snoozed timeline's state kept until its snooze's end plus `ttl` (ds_maintenance,
    -- with the partition's TTL); ended snoozes removed. Nothing to do without snoozes.
    function snoozes.keep_alive(tag, now, ttl)
        if not snoozes.any(tag) then
            return
        end
        local key, latest = snoozes_key(tag), now
        local entries = redis.call('HGETALL', key)
        for i = 1, #entries, 2 do
            local timeline, ends = entries[i], parse(entries[i + 1])
            if ends <= now then
                redis.call('HDEL', key, timeline)
            else
                extend_ttl(timeline_key(tag, timeline), ttl_ms(ends - now + ttl))
                latest = math.max(latest, ends)
            end
        end
        refresh_partition_ttl(tag, latest - now + ttl)
    end

    -- The snooze's end as stored (ds_inspect, read-only: one that has ended but was not
    -- removed yet is returned too), else nil.
    function snoozes.held(tag, timeline)
        local found = redis.call('HGET', snoozes_key(tag), timeline)
        return found ~= false and parse(found) or nil
    end

    -- The timeline's snooze removed (ds_delete): 1 when it had one.
    function snoozes.forget(tag, timeline)
        return redis.call('HDEL', snoozes_key(tag), timeline)
    end
end
