// CPU model of the MPS kernels the MPSNNGraph nodes run (MPSKernel.h, MPSCNNKernel.h,
// MPSCNNConvolution.h, MPSCNNPooling.h, MPSCNNNeuron.h, MPSCNNSoftMax.h,
// MPSCNNNormalization.h, MPSCNNInstanceNormalization.h, MPSCNNMath.h, MPSCNNUpsampling.h,
// MPSNNReshape.h/MPSNNPad, MPSImageResampling.h). Public classes and members are Apple's
// Swift interface (Xcode 12 SDK MetalPerformanceShaders.swift, listed in apple_api.py);
// kernels generated code never names are internal (same names, the graph nodes make them).
//
// Window placement (MPSCNNConvolutionDescriptor kernelWidth/kernelHeight: "The position of
// the left edge of the kernel window is given by offset.x - (kernelWidth>>1)"): destination
// pixel x reads source pixels starting at x * strideInPixelsX + offset.x - (kernelWidth >> 1);
// with dilation the window spans (kernelWidth - 1) * dilationRateX + 1 pixels and that
// extent takes the place of kernelWidth. Pixels outside the source follow `edgeMode`.
// The inner loops run over contiguous channels (HWC scratch buffers) so -O vectorises them.

import Foundation

/// MPSKernel.h `MPSKernel` (iOS 9 / macOS 10.13).
open class MPSKernel: NSObject, NSCopying {
    public let device: MTLDevice
    public var label: String?
    public var options: MPSKernelOptions = []

    public init(device: MTLDevice) { self.device = device }

    public func copy(with zone: NSZone? = nil) -> Any { self }
}

/// MPSCNNKernel.h `MPSCNNKernel` (iOS 10 / macOS 10.13).
open class MPSCNNKernel: MPSKernel {
    public var offset: MPSOffset = MPSOffset()
    public var clipRect: MTLRegion = MTLRegion(origin: MTLOrigin(), size: MTLSize(width: Int.max, height: Int.max, depth: Int.max))
    public var destinationFeatureChannelOffset: Int = 0
    public var sourceFeatureChannelOffset: Int = 0
    public var edgeMode: MPSImageEdgeMode = .zero
    public internal(set) var kernelWidth: Int = 1
    public internal(set) var kernelHeight: Int = 1
    public internal(set) var strideInPixelsX: Int = 1
    public internal(set) var strideInPixelsY: Int = 1
    public internal(set) var dilationRateX: Int = 1
    public internal(set) var dilationRateY: Int = 1
    /// MPSCNNKernel.h padding (iOS 11 / macOS 10.13). The default's method is a guess
    /// (centred, remainder top-left, same size); the graph uses its node's paddingPolicy.
    @available(iOS 11.0, macOS 10.13, *)
    public var padding: MPSNNPadding = MPSNNDefaultPadding(method: [.centered, .topLeft, .sizeSame])
    /// MPSCNNKernel.h: the allocator of the images encode(commandBuffer:sourceImage:) returns.
    @available(iOS 11.0, macOS 10.13, *)
    public var destinationImageAllocator: MPSImageAllocator = MPSImage.defaultAllocator()

    /// Destination size without a custom padding policy (MPSNeuralNetworkTypes.h size bits).
    func simDefaultDestination(_ sources: [MPSImage], method: MPSNNPaddingMethod) -> (w: Int, h: Int, c: Int) {
        let s = sources[0]
        func size(_ n: Int, _ k: Int, _ st: Int) -> Int {
            switch method.rawValue & (3 << 4) {
            case MPSNNPaddingMethod.sizeSame.rawValue: return (n + st - 1) / st
            case MPSNNPaddingMethod.sizeFull.rawValue: return (n + k - 2) / st + 1
            default: return max((n - k) / st + 1, 1)
            }
        }
        let kw = (kernelWidth - 1) * dilationRateX + 1
        let kh = (kernelHeight - 1) * dilationRateY + 1
        return (size(s.width, kw, strideInPixelsX), size(s.height, kh, strideInPixelsY), simOutputChannels(sources))
    }

    /// The offset a non-custom padding policy sets: the window centred, remainder top-left.
    func simDefaultOffset(_ sources: [MPSImage], _ w: Int, _ h: Int) {
        let kw = (kernelWidth - 1) * dilationRateX + 1
        let kh = (kernelHeight - 1) * dilationRateY + 1
        let padX = max((w - 1) * strideInPixelsX + kw - sources[0].width, 0)
        let padY = max((h - 1) * strideInPixelsY + kh - sources[0].height, 0)
        offset = MPSOffset(x: (kw >> 1) - (padX + 1) / 2, y: (kh >> 1) - (padY + 1) / 2, z: 0)
    }

    func simOutputChannels(_ sources: [MPSImage]) -> Int { sources[0].featureChannels }

    /// Run the kernel on the CPU now (the command buffer calls this when committed).
    func simRun(_ sources: [MPSImage], _ dest: MPSImage) { fatalError("\(type(of: self)) is not modelled") }

    public func encode(commandBuffer: MTLCommandBuffer, sourceImage: MPSImage, destinationImage: MPSImage) {
        simEnqueue(commandBuffer) {
            self.simRun([sourceImage], destinationImage)
            destinationImage.simNeedsSync = true
        }
    }

    /// Window start in source coordinates for destination coordinate 0.
    var simOriginX: Int { offset.x - (((kernelWidth - 1) * dilationRateX + 1) >> 1) }
    var simOriginY: Int { offset.y - (((kernelHeight - 1) * dilationRateY + 1) >> 1) }

    /// Map a source coordinate that may be out of bounds; nil means "reads as zero".
    @inline(__always) func simEdge(_ i: Int, _ n: Int) -> Int? {
        if i >= 0 && i < n { return i }
        switch edgeMode {
        case .zero, .constant: return nil
        case .clamp: return min(max(i, 0), n - 1)
        case .mirror: return i < 0 ? min(-i, n - 1) : max(2 * n - 2 - i, 0)
        case .mirrorWithEdge: return i < 0 ? min(-i - 1, n - 1) : max(2 * n - 1 - i, 0)
        }
    }
}

class MPSCNNBinaryKernel: MPSKernel {
    public var primaryOffset = MPSOffset()
    public var secondaryOffset = MPSOffset()
    public var destinationFeatureChannelOffset: Int = 0
    public var primaryEdgeMode: MPSImageEdgeMode = .zero
    public var secondaryEdgeMode: MPSImageEdgeMode = .zero
    func simRun(_ sources: [MPSImage], _ dest: MPSImage) { fatalError("\(type(of: self)) is not modelled") }
}

// MARK: - Convolutions

/// MPSCNNConvolution.h `MPSCNNConvolution` (iOS 10 / macOS 10.13). Weights come from the data
/// source in OHWI order,
/// `[outputChannels][kernelHeight][kernelWidth][inputChannels/groups]`, and are copied when
/// the kernel is made (load(), read, purge()), as MPS does.
open class MPSCNNConvolution: MPSCNNKernel {
    public let inputFeatureChannels: Int
    public let outputFeatureChannels: Int
    public let groups: Int
    public let dataSource: MPSCNNConvolutionDataSource
    let depthwise: Bool
    var simPacked: [Float] = []  // [group][ky][kx][i][o], or [ky][kx][c] for depthwise
    var simBias: [Float]
    var simNeuron: SimNeuron?
    var simFCWeights: [Float] = []  // fully connected: as given, [o][x][y][i]
    /// MPSCNNConvolution.h kernelWeightsDataType (iOS 14 / macOS 11): "When
    /// kernelWeightsDataType is unimplemented the kernel will use float16 precision". With
    /// float16 weights the model rounds the weights and the source values to float16 before
    /// multiplying and sums the products in float32 -- the accumulator precision is a guess
    /// (MPSNNConvolutionAccumulatorPrecisionOption is not modelled; its default is not given).
    let simHalf: Bool

    @available(iOS 11.0, macOS 10.13, *)
    public init(device: MTLDevice, weights: MPSCNNConvolutionDataSource) {
        precondition(weights.load(), "MPSCNNConvolutionDataSource.load() failed for \(weights.label() ?? "?")")
        let d = weights.descriptor()
        precondition(weights.weightsLayout() == .OHWI, "only OHWI weights exist (MPSCNNConvolution.h)")
        dataSource = weights
        inputFeatureChannels = d.inputFeatureChannels
        outputFeatureChannels = d.outputFeatureChannels
        depthwise = d is MPSCNNDepthWiseConvolutionDescriptor
        groups = depthwise ? 1 : d.groups
        let kh = d.kernelHeight, kw = d.kernelWidth, o = d.outputFeatureChannels
        if depthwise {
            precondition(d.outputFeatureChannels == d.inputFeatureChannels,
                         "MPSCNNDepthWiseConvolutionDescriptor: only channel multiplier 1 is supported")
        } else if groups > 1 {
            // MPSCNNConvolutionDescriptor.groups: "the number of channels in each group must
            // be a multiple of 4".
            precondition(d.inputFeatureChannels % groups == 0 && d.outputFeatureChannels % groups == 0
                         && (d.inputFeatureChannels / groups) % 4 == 0 && (d.outputFeatureChannels / groups) % 4 == 0,
                         "MPSCNNConvolution: channels per group must be a multiple of 4 (\(weights.label() ?? "?"))")
        }
        let ig = depthwise ? 1 : d.inputFeatureChannels / groups
        let count = o * kh * kw * ig
        var w = floatsFrom(weights.weights(), count: count, type: weights.dataType())
        simHalf = simKernelWeightsType(weights) == .float16
        if simHalf { w = w.map(roundToHalf) }
        simBias = weights.biasTerms().map { Array(UnsafeBufferPointer(start: $0, count: o)) }
            ?? [Float](repeating: 0, count: o)
        if let bn = d.simBatchNorm {
            for oc in 0..<o {
                let scale = (bn.gamma?[oc] ?? 1) / sqrtf(bn.variance[oc] + bn.epsilon)
                for j in 0..<(kh * kw * ig) { w[oc * kh * kw * ig + j] *= scale }
                simBias[oc] = (simBias[oc] - bn.mean[oc]) * scale + (bn.beta?[oc] ?? 0)
            }
        }
        simNeuron = d.fusedNeuronDescriptor.neuronType == .none ? nil : SimNeuron(d.fusedNeuronDescriptor)
        weights.purge()
        super.init(device: device)
        kernelWidth = kw
        kernelHeight = kh
        strideInPixelsX = d.strideInPixelsX
        strideInPixelsY = d.strideInPixelsY
        dilationRateX = d.dilationRateX
        dilationRateY = d.dilationRateY
        simPack(w, kh: kh, kw: kw, ig: ig)
    }

    func simPack(_ w: [Float], kh: Int, kw: Int, ig: Int) {
        let o = outputFeatureChannels
        if depthwise {
            simPacked = [Float](repeating: 0, count: kh * kw * o)
            for oc in 0..<o { for k in 0..<(kh * kw) { simPacked[k * o + oc] = w[oc * kh * kw + k] } }
            return
        }
        let og = o / groups
        simPacked = [Float](repeating: 0, count: w.count)
        for oc in 0..<o {
            let g = oc / og, oo = oc % og
            for ky in 0..<kh { for kx in 0..<kw { for i in 0..<ig {
                simPacked[((((g * kh + ky) * kw + kx) * ig + i) * og) + oo] = w[((oc * kh + ky) * kw + kx) * ig + i]
            } } }
        }
    }

    override func simOutputChannels(_ sources: [MPSImage]) -> Int { outputFeatureChannels }

    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        precondition(src.featureChannels == inputFeatureChannels,
                     "\(dataSource.label() ?? "convolution"): source has \(src.featureChannels) feature channels, weights expect \(inputFeatureChannels)")
        let cin = inputFeatureChannels, o = outputFeatureChannels
        let sw = src.width, sh = src.height, dw = dest.width, dh = dest.height
        let x0 = simOriginX, y0 = simOriginY
        var s = src.simHWC()
        if simHalf { s = s.map(roundToHalf) }
        var out = [Float](repeating: 0, count: dw * dh * o)
        s.withUnsafeBufferPointer { sb in
            simPacked.withUnsafeBufferPointer { wb in
                out.withUnsafeMutableBufferPointer { ob in
                    let sp = sb.baseAddress!, wp = wb.baseAddress!, op = ob.baseAddress!
                    let ig = depthwise ? 1 : cin / groups, og = o / groups
                    let tap = UnsafeMutablePointer<Double>.allocate(capacity: max(og, 1))
                    defer { tap.deallocate() }
                    for oy in 0..<dh {
                        for ox in 0..<dw {
                            let acc = op + (oy * dw + ox) * o
                            for c in 0..<o { acc[c] = simBias[c] }
                            for ky in 0..<kernelHeight {
                                guard let iy = simEdge(oy * strideInPixelsY + y0 + ky * dilationRateY, sh) else { continue }
                                for kx in 0..<kernelWidth {
                                    guard let ix = simEdge(ox * strideInPixelsX + x0 + kx * dilationRateX, sw) else { continue }
                                    let px = sp + (iy * sw + ix) * cin
                                    if depthwise {
                                        let w = wp + (ky * kernelWidth + kx) * o
                                        for c in 0..<o { acc[c] += px[c] * w[c] }
                                        continue
                                    }
                                    for g in 0..<groups {
                                        let wg = wp + (((g * kernelHeight + ky) * kernelWidth + kx) * ig) * og
                                        // One partial sum per kernel tap (in Double), then
                                        // added: the model's own rounding stays well below
                                        // float32 references', so a comparison measures theirs.
                                        for oo in 0..<og { tap[oo] = 0 }
                                        for i in 0..<ig {
                                            let v = Double(px[g * ig + i])
                                            if v == 0 { continue }
                                            let w = wg + i * og
                                            for oo in 0..<og { tap[oo] += v * Double(w[oo]) }
                                        }
                                        let a = acc + g * og
                                        for oo in 0..<og { a[oo] += Float(tap[oo]) }
                                    }
                                }
                            }
                        }
                    }
                    simNeuron?.apply(op, pixels: dw * dh, channels: o)
                    dest.simSetHWC(op, stride: o, channels: o, channelOffset: destinationFeatureChannelOffset)
                }
            }
        }
    }
}

/// MPSCNNConvolution.h `MPSCNNFullyConnected` (iOS 10 / macOS 10.13): "takes a srcW x srcH x Ni MPSCNNImage, convolves it with
/// Weights[No][SrcW][srcH][Ni] and produces a 1 x 1 x No output" -- note width before height.
open class MPSCNNFullyConnected: MPSCNNConvolution {
    override func simPack(_ w: [Float], kh: Int, kw: Int, ig: Int) { simFCWeights = w }

    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        precondition(src.width == kernelWidth && src.height == kernelHeight && src.featureChannels == inputFeatureChannels,
                     "MPSCNNFullyConnected \(dataSource.label() ?? ""): kernel \(kernelWidth)x\(kernelHeight)x\(inputFeatureChannels) must equal the source \(src.width)x\(src.height)x\(src.featureChannels)")
        let ni = inputFeatureChannels, o = outputFeatureChannels, w = src.width, h = src.height
        var s = src.simHWC()
        if simHalf { s = s.map(roundToHalf) }
        var out = simBias
        s.withUnsafeBufferPointer { sb in
            simFCWeights.withUnsafeBufferPointer { wb in
                for oc in 0..<o {
                    var acc: Float = 0
                    for x in 0..<w {
                        for y in 0..<h {
                            let px = sb.baseAddress! + (y * w + x) * ni
                            let wr = wb.baseAddress! + ((oc * w + x) * h + y) * ni
                            var part: Float = 0
                            for i in 0..<ni { part += px[i] * wr[i] }
                            acc += part
                        }
                    }
                    out[oc] += acc
                }
            }
        }
        out.withUnsafeMutableBufferPointer { ob in
            simNeuron?.apply(ob.baseAddress!, pixels: 1, channels: o)
            dest.simSetHWC(ob.baseAddress!, stride: o, channels: o, channelOffset: destinationFeatureChannelOffset)
        }
    }

    override func simDefaultDestination(_ sources: [MPSImage], method: MPSNNPaddingMethod) -> (w: Int, h: Int, c: Int) {
        (1, 1, outputFeatureChannels)
    }
}

/// MPSCNNConvolution.h `MPSCNNConvolutionTranspose` (iOS 11 / macOS 10.13): zeros are put between source pixels
/// ("Intermediate image size = (srcSize - 1) * Stride + 1"), then the weights are applied
/// as-is (no rotation) over that image; "totalOffset = Offset * stride + kernelOffset" places
/// the kernel: destination pixel x is centred on intermediate pixel x + totalOffset.
open class MPSCNNConvolutionTranspose: MPSCNNKernel {
    public let inputFeatureChannels: Int
    public let outputFeatureChannels: Int
    public let groups: Int
    public var kernelOffsetX: Int = 0
    public var kernelOffsetY: Int = 0
    @available(iOS 13.0, macOS 10.15, *)
    public var dataSource: MPSCNNConvolutionDataSource { simDataSource }
    let simDataSource: MPSCNNConvolutionDataSource
    var simPacked: [Float]  // [ky][kx][i][o]
    var simBias: [Float]
    var simNeuron: SimNeuron?

    public init(device: MTLDevice, weights: MPSCNNConvolutionDataSource) {
        precondition(weights.load(), "MPSCNNConvolutionDataSource.load() failed for \(weights.label() ?? "?")")
        let d = weights.descriptor()
        simDataSource = weights
        // MPSCNNConvolution.h: MPSCNNConvolutionTranspose supports float32 weights only.
        if weights.dataType() != .float32 {  // fatalError: -O keeps the message
            fatalError("MPSCNNConvolutionTranspose \(weights.label() ?? ""): weights of data type \(weights.dataType()); only float32 is supported (MPSCNNConvolution.h)")
        }
        inputFeatureChannels = d.inputFeatureChannels
        outputFeatureChannels = d.outputFeatureChannels
        groups = d.groups
        precondition(groups == 1, "CPU model of MPS: grouped convolution transpose is not modelled")
        precondition(d.dilationRateX == 1 && d.dilationRateY == 1, "CPU model of MPS: dilated convolution transpose is not modelled")
        let kh = d.kernelHeight, kw = d.kernelWidth, o = d.outputFeatureChannels, i = d.inputFeatureChannels
        let w = floatsFrom(weights.weights(), count: o * kh * kw * i, type: weights.dataType())
        simBias = weights.biasTerms().map { Array(UnsafeBufferPointer(start: $0, count: o)) } ?? [Float](repeating: 0, count: o)
        simNeuron = d.fusedNeuronDescriptor.neuronType == .none ? nil : SimNeuron(d.fusedNeuronDescriptor)
        simPacked = [Float](repeating: 0, count: w.count)
        for oc in 0..<o { for k in 0..<(kh * kw) { for ic in 0..<i {
            simPacked[(k * i + ic) * o + oc] = w[(oc * kh * kw + k) * i + ic]
        } } }
        weights.purge()
        super.init(device: device)
        kernelWidth = kw
        kernelHeight = kh
        strideInPixelsX = d.strideInPixelsX
        strideInPixelsY = d.strideInPixelsY
    }

    override func simOutputChannels(_ sources: [MPSImage]) -> Int { outputFeatureChannels }

    override func simDefaultDestination(_ sources: [MPSImage], method: MPSNNPaddingMethod) -> (w: Int, h: Int, c: Int) {
        ((sources[0].width - 1) * strideInPixelsX + 1, (sources[0].height - 1) * strideInPixelsY + 1, outputFeatureChannels)
    }

    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        precondition(src.featureChannels == inputFeatureChannels)
        let ci = inputFeatureChannels, o = outputFeatureChannels
        let sw = src.width, sh = src.height, dw = dest.width, dh = dest.height
        let sx = strideInPixelsX, sy = strideInPixelsY
        let tx = offset.x * sx + kernelOffsetX - (kernelWidth >> 1)
        let ty = offset.y * sy + kernelOffsetY - (kernelHeight >> 1)
        let s = src.simHWC()
        var out = [Float](repeating: 0, count: dw * dh * o)
        s.withUnsafeBufferPointer { sb in
            simPacked.withUnsafeBufferPointer { wb in
                out.withUnsafeMutableBufferPointer { ob in
                    let sp = sb.baseAddress!, wp = wb.baseAddress!, op = ob.baseAddress!
                    for oy in 0..<dh {
                        for ox in 0..<dw {
                            let acc = op + (oy * dw + ox) * o
                            for c in 0..<o { acc[c] = simBias[c] }
                            for ky in 0..<kernelHeight {
                                let j = oy + ty + ky
                                if j < 0 || j % sy != 0 || j / sy >= sh { continue }
                                for kx in 0..<kernelWidth {
                                    let k = ox + tx + kx
                                    if k < 0 || k % sx != 0 || k / sx >= sw { continue }
                                    let px = sp + ((j / sy) * sw + k / sx) * ci
                                    let wk = wp + (ky * kernelWidth + kx) * ci * o
                                    for i in 0..<ci {
                                        let v = px[i]
                                        if v == 0 { continue }
                                        let w = wk + i * o
                                        for c in 0..<o { acc[c] += v * w[c] }
                                    }
                                }
                            }
                        }
                    }
                    simNeuron?.apply(op, pixels: dw * dh, channels: o)
                    dest.simSetHWC(op, stride: o, channels: o, channelOffset: destinationFeatureChannelOffset)
                }
            }
        }
    }
}

// MARK: - Pooling (MPSCNNPooling.h)

/// MPSCNNPooling.h `MPSCNNPooling` (iOS 10 / macOS 10.13).
open class MPSCNNPooling: MPSCNNKernel {
    public init(device: MTLDevice, kernelWidth: Int, kernelHeight: Int, strideInPixelsX: Int, strideInPixelsY: Int) {
        super.init(device: device)
        self.kernelWidth = kernelWidth
        self.kernelHeight = kernelHeight
        self.strideInPixelsX = strideInPixelsX
        self.strideInPixelsY = strideInPixelsY
    }

    /// Reduce every window; `reduce` gets the in-bounds pixels' HWC pointers (nil = a zero
    /// read under edgeMode .zero) and the count of positions the average divides by.
    func simPool(_ src: MPSImage, _ dest: MPSImage, average: Bool, zeroPadX: Int, zeroPadY: Int) {
        let c = src.featureChannels, sw = src.width, sh = src.height, dw = dest.width, dh = dest.height
        let s = src.simHWC()
        var out = [Float](repeating: 0, count: dw * dh * c)
        s.withUnsafeBufferPointer { sb in
            out.withUnsafeMutableBufferPointer { ob in
                for oy in 0..<dh {
                    for ox in 0..<dw {
                        let acc = ob.baseAddress! + (oy * dw + ox) * c
                        for ch in 0..<c { acc[ch] = average ? 0 : -Float.infinity }
                        var n = 0
                        for ky in 0..<kernelHeight {
                            let yy = oy * strideInPixelsY + simOriginY + ky
                            for kx in 0..<kernelWidth {
                                let xx = ox * strideInPixelsX + simOriginX + kx
                                let inside = yy >= 0 && yy < sh && xx >= 0 && xx < sw
                                if !inside && edgeMode == .clamp {
                                    // MPSCNNPoolingAverage.zeroPadSizeX: with .clamp the window
                                    // shrinks to the source plus zeroPadSize, and the padding
                                    // counts in the divisor as zeros.
                                    if yy >= -zeroPadY && yy < sh + zeroPadY && xx >= -zeroPadX && xx < sw + zeroPadX {
                                        n += 1
                                    }
                                    continue
                                }
                                n += 1
                                if !inside {  // edgeMode .zero: reads as 0
                                    for ch in 0..<c { acc[ch] = average ? acc[ch] : max(acc[ch], 0) }
                                    continue
                                }
                                let px = sb.baseAddress! + (yy * sw + xx) * c
                                if average {
                                    for ch in 0..<c { acc[ch] += px[ch] }
                                } else {
                                    for ch in 0..<c { acc[ch] = max(acc[ch], px[ch]) }
                                }
                            }
                        }
                        if average {
                            let inv = 1 / Float(max(n, 1))
                            for ch in 0..<c { acc[ch] *= inv }
                        }
                    }
                }
                dest.simSetHWC(ob.baseAddress!, stride: c, channels: c, channelOffset: destinationFeatureChannelOffset)
            }
        }
    }
}

/// MPSCNNPooling.h `MPSCNNPoolingMax`.
open class MPSCNNPoolingMax: MPSCNNPooling {
    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        simPool(sources[0], dest, average: false, zeroPadX: 0, zeroPadY: 0)
    }
}

/// MPSCNNPooling.h `MPSCNNPoolingAverage`.
open class MPSCNNPoolingAverage: MPSCNNPooling {
    public var zeroPadSizeX: Int = 0
    public var zeroPadSizeY: Int = 0
    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        simPool(sources[0], dest, average: true, zeroPadX: zeroPadSizeX, zeroPadY: zeroPadSizeY)
    }
}

// MARK: - Pixel-wise kernels

/// Base of kernels whose destination pixel depends on the same source pixel only.
class SimPixelKernel: MPSCNNKernel {
    override func simDefaultDestination(_ sources: [MPSImage], method: MPSNNPaddingMethod) -> (w: Int, h: Int, c: Int) {
        (sources[0].width, sources[0].height, simOutputChannels(sources))
    }
    func simPixels(_ p: UnsafeMutablePointer<Float>, pixels: Int, channels: Int) {}
    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        var v = src.simHWC()
        let c = src.featureChannels
        v.withUnsafeMutableBufferPointer { b in
            simPixels(b.baseAddress!, pixels: src.width * src.height, channels: c)
            dest.simSetHWC(b.baseAddress!, stride: c, channels: c, channelOffset: destinationFeatureChannelOffset)
        }
    }
}

class MPSCNNNeuron: SimPixelKernel {
    let simNeuron: SimNeuron
    public var neuronType: MPSCNNNeuronType { simNeuron.type }
    public init(device: MTLDevice, neuronDescriptor: MPSNNNeuronDescriptor) {
        simNeuron = SimNeuron(neuronDescriptor)
        super.init(device: device)
    }
    override func simPixels(_ p: UnsafeMutablePointer<Float>, pixels: Int, channels: Int) {
        simNeuron.apply(p, pixels: pixels, channels: channels)
    }
}

/// MPSCNNSoftMax.h: softmax across the feature channels of each pixel.
class MPSCNNSoftMax: SimPixelKernel {
    var simLog: Bool { false }
    override func simPixels(_ p: UnsafeMutablePointer<Float>, pixels: Int, channels: Int) {
        for px in 0..<pixels {
            let q = p + px * channels
            var m = -Float.infinity
            for c in 0..<channels { m = max(m, q[c]) }
            var sum: Float = 0
            for c in 0..<channels { sum += expf(q[c] - m) }
            for c in 0..<channels { q[c] = simLog ? q[c] - m - logf(sum) : expf(q[c] - m) / sum }
        }
    }
}

class MPSCNNLogSoftMax: MPSCNNSoftMax {
    override var simLog: Bool { true }
}

/// MPSCNNNormalization.h MPSCNNCrossChannelNormalization:
/// result(k) = source(k) / (delta + alpha / N * sum_{j in window(k)} source(j)^2)^beta,
/// N = kernelSize, window j in [k - N/2, k + (N-1)/2] (the header's window; ONNX LRN's is
/// [k - (N-1)/2, k + N/2], the same for odd N only).
class MPSCNNCrossChannelNormalization: SimPixelKernel {
    public var alpha: Float = 1.0
    public var beta: Float = 5.0
    public var delta: Float = 1.0
    public let kernelSize: Int
    public init(device: MTLDevice, kernelSize: Int) {
        self.kernelSize = kernelSize
        super.init(device: device)
    }
    override func simPixels(_ p: UnsafeMutablePointer<Float>, pixels: Int, channels: Int) {
        var sq = [Float](repeating: 0, count: channels)
        let lo = kernelSize / 2, hi = (kernelSize - 1) / 2
        for px in 0..<pixels {
            let q = p + px * channels
            for c in 0..<channels { sq[c] = q[c] * q[c] }
            for c in 0..<channels {
                var s: Float = 0
                for j in max(c - lo, 0)...min(c + hi, channels - 1) { s += sq[j] }
                q[c] = q[c] / powf(delta + alpha / Float(kernelSize) * s, beta)
            }
        }
    }
}

/// MPSCNNInstanceNormalization.h: per image and channel, gamma * (x - mean) / sqrt(var + eps) + beta.
class MPSCNNInstanceNormalization: MPSCNNKernel {
    public let dataSource: MPSCNNInstanceNormalizationDataSource
    public var epsilon: Float
    let simGamma: [Float]
    let simBeta: [Float]
    public init(device: MTLDevice, dataSource: MPSCNNInstanceNormalizationDataSource) {
        self.dataSource = dataSource
        precondition(dataSource.load(), "MPSCNNInstanceNormalizationDataSource.load() failed")
        let n = dataSource.numberOfFeatureChannels
        simGamma = dataSource.gamma().map { Array(UnsafeBufferPointer(start: $0, count: n)) } ?? [Float](repeating: 1, count: n)
        simBeta = dataSource.beta().map { Array(UnsafeBufferPointer(start: $0, count: n)) } ?? [Float](repeating: 0, count: n)
        epsilon = dataSource.epsilon()
        dataSource.purge()
        super.init(device: device)
    }
    override func simDefaultDestination(_ sources: [MPSImage], method: MPSNNPaddingMethod) -> (w: Int, h: Int, c: Int) {
        (sources[0].width, sources[0].height, sources[0].featureChannels)
    }
    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        let c = src.featureChannels, n = src.width * src.height
        precondition(c == simGamma.count, "instance normalization: \(c) channels, data source has \(simGamma.count)")
        var v = src.simHWC()
        for ch in 0..<c {
            var mean: Double = 0
            for p in 0..<n { mean += Double(v[p * c + ch]) }
            mean /= Double(n)
            var variance: Double = 0
            for p in 0..<n { let d = Double(v[p * c + ch]) - mean; variance += d * d }
            variance /= Double(n)
            let scale = Float(Double(simGamma[ch]) / (variance + Double(epsilon)).squareRoot())
            let shift = simBeta[ch] - Float(mean) * scale
            for p in 0..<n { v[p * c + ch] = v[p * c + ch] * scale + shift }
        }
        v.withUnsafeBufferPointer { dest.simSetHWC($0.baseAddress!, stride: c, channels: c, channelOffset: destinationFeatureChannelOffset) }
    }
}

// MARK: - Arithmetic (MPSCNNMath.h)

/// result = clamp(primaryScale * primary (op) secondaryScale * secondary + bias,
/// minimumValue, maximumValue); a stride of 0 broadcasts the secondary along that axis.
class MPSCNNArithmetic: MPSCNNBinaryKernel {
    public var primaryScale: Float = 1
    public var secondaryScale: Float = 1
    public var bias: Float = 0
    public var minimumValue: Float = -Float.greatestFiniteMagnitude
    public var maximumValue: Float = Float.greatestFiniteMagnitude
    public var primaryStrideInFeatureChannels: Int = 1
    public var secondaryStrideInFeatureChannels: Int = 1
    public var primaryStrideInPixelsX: Int = 1
    public var primaryStrideInPixelsY: Int = 1
    public var secondaryStrideInPixelsX: Int = 1
    public var secondaryStrideInPixelsY: Int = 1
    func simOp(_ a: Float, _ b: Float) -> Float { fatalError() }

    public override init(device: MTLDevice) { super.init(device: device) }

    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let a = sources[0], b = sources[1]
        let c = dest.featureChannels, w = dest.width, h = dest.height
        let av = a.simHWC(), bv = b.simHWC()
        var out = [Float](repeating: 0, count: w * h * c)
        for y in 0..<h {
            for x in 0..<w {
                let pa = ((y * primaryStrideInPixelsY) * a.width + x * primaryStrideInPixelsX) * a.featureChannels
                let pb = ((y * secondaryStrideInPixelsY) * b.width + x * secondaryStrideInPixelsX) * b.featureChannels
                for ch in 0..<c {
                    let r = simOp(primaryScale * av[pa + ch * primaryStrideInFeatureChannels],
                                  secondaryScale * bv[pb + ch * secondaryStrideInFeatureChannels]) + bias
                    out[(y * w + x) * c + ch] = min(max(r, minimumValue), maximumValue)
                }
            }
        }
        out.withUnsafeBufferPointer { dest.simSetHWC($0.baseAddress!, stride: c, channels: c, channelOffset: destinationFeatureChannelOffset) }
    }
}

class MPSCNNAdd: MPSCNNArithmetic { override func simOp(_ a: Float, _ b: Float) -> Float { a + b } }
class MPSCNNSubtract: MPSCNNArithmetic { override func simOp(_ a: Float, _ b: Float) -> Float { a - b } }
class MPSCNNMultiply: MPSCNNArithmetic { override func simOp(_ a: Float, _ b: Float) -> Float { a * b } }
class MPSCNNDivide: MPSCNNArithmetic { override func simOp(_ a: Float, _ b: Float) -> Float { a / b } }

// MARK: - Resampling and padding

/// MPSCNNUpsampling.h: nearest repeats each pixel; bilinear with alignCorners maps the
/// corner pixel centres onto each other.
class MPSCNNUpsampling: MPSCNNKernel {
    public let scaleFactorX: Double
    public let scaleFactorY: Double
    public let alignCorners: Bool
    let bilinear: Bool
    init(device: MTLDevice, x: Int, y: Int, bilinear: Bool, alignCorners: Bool) {
        scaleFactorX = Double(x)
        scaleFactorY = Double(y)
        self.bilinear = bilinear
        self.alignCorners = alignCorners
        super.init(device: device)
    }
    override func simDefaultDestination(_ sources: [MPSImage], method: MPSNNPaddingMethod) -> (w: Int, h: Int, c: Int) {
        (sources[0].width * Int(scaleFactorX), sources[0].height * Int(scaleFactorY), sources[0].featureChannels)
    }
    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        let c = src.featureChannels, sw = src.width, sh = src.height, dw = dest.width, dh = dest.height
        let s = src.simHWC()
        var out = [Float](repeating: 0, count: dw * dh * c)
        for y in 0..<dh {
            for x in 0..<dw {
                let o = (y * dw + x) * c
                if !bilinear {
                    let p = ((y / Int(scaleFactorY)) * sw + x / Int(scaleFactorX)) * c
                    for ch in 0..<c { out[o + ch] = s[p + ch] }
                    continue
                }
                precondition(alignCorners, "CPU model of MPS: bilinear upsampling without alignCorners is not modelled")
                let fy = dh > 1 ? Float(y) * Float(sh - 1) / Float(dh - 1) : 0
                let fx = dw > 1 ? Float(x) * Float(sw - 1) / Float(dw - 1) : 0
                simLerp(s, c, sw, sh, fx, fy, &out, o)
            }
        }
        out.withUnsafeBufferPointer { dest.simSetHWC($0.baseAddress!, stride: c, channels: c, channelOffset: destinationFeatureChannelOffset) }
    }
}

@inline(__always) func simLerp(_ s: [Float], _ c: Int, _ sw: Int, _ sh: Int, _ fx: Float, _ fy: Float,
                               _ out: inout [Float], _ o: Int) {
    let x0 = min(Int(fx), sw - 1), y0 = min(Int(fy), sh - 1)
    let x1 = min(x0 + 1, sw - 1), y1 = min(y0 + 1, sh - 1)
    let ax = fx - Float(x0), ay = fy - Float(y0)
    for ch in 0..<c {
        let top = s[(y0 * sw + x0) * c + ch] * (1 - ax) + s[(y0 * sw + x1) * c + ch] * ax
        let bot = s[(y1 * sw + x0) * c + ch] * (1 - ax) + s[(y1 * sw + x1) * c + ch] * ax
        out[o + ch] = top * (1 - ay) + bot * ay
    }
}

class MPSCNNUpsamplingNearest: MPSCNNUpsampling {
    public init(device: MTLDevice, integerScaleFactorX: Int, integerScaleFactorY: Int) {
        super.init(device: device, x: integerScaleFactorX, y: integerScaleFactorY, bilinear: false, alignCorners: false)
    }
}

class MPSCNNUpsamplingBilinear: MPSCNNUpsampling {
    public init(device: MTLDevice, integerScaleFactorX: Int, integerScaleFactorY: Int, alignCorners: Bool) {
        super.init(device: device, x: integerScaleFactorX, y: integerScaleFactorY, bilinear: true, alignCorners: alignCorners)
    }
}

/// MPSImageResampling.h MPSImageBilinearScale with the default transform: the source is
/// stretched over the destination, sampling at pixel centres,
/// src = (dst + 0.5) * srcSize / dstSize - 0.5, clamped to the edge.
class MPSImageBilinearScale: MPSCNNKernel {
    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        let c = src.featureChannels, sw = src.width, sh = src.height, dw = dest.width, dh = dest.height
        let s = src.simHWC()
        var out = [Float](repeating: 0, count: dw * dh * c)
        for y in 0..<dh {
            let fy = min(max((Float(y) + 0.5) * Float(sh) / Float(dh) - 0.5, 0), Float(sh - 1))
            for x in 0..<dw {
                let fx = min(max((Float(x) + 0.5) * Float(sw) / Float(dw) - 0.5, 0), Float(sw - 1))
                simLerp(s, c, sw, sh, fx, fy, &out, (y * dw + x) * c)
            }
        }
        out.withUnsafeBufferPointer { dest.simSetHWC($0.baseAddress!, stride: c, channels: c, channelOffset: destinationFeatureChannelOffset) }
    }
}

/// MPSNNReshape.h MPSNNPad: grows the image by paddingSizeBefore/After, filling per edgeMode
/// (.constant uses fillValue).
class MPSNNPad: MPSCNNKernel {
    public var paddingSizeBefore: MPSImageCoordinate
    public var paddingSizeAfter: MPSImageCoordinate
    public var fillValue: Float = 0
    public init(device: MTLDevice, paddingSizeBefore: MPSImageCoordinate, paddingSizeAfter: MPSImageCoordinate) {
        self.paddingSizeBefore = paddingSizeBefore
        self.paddingSizeAfter = paddingSizeAfter
        super.init(device: device)
    }
    override func simDefaultDestination(_ sources: [MPSImage], method: MPSNNPaddingMethod) -> (w: Int, h: Int, c: Int) {
        precondition(paddingSizeBefore.channel == 0 && paddingSizeAfter.channel == 0, "CPU model of MPS: channel padding is not modelled")
        let s = sources[0]
        return (s.width + paddingSizeBefore.x + paddingSizeAfter.x, s.height + paddingSizeBefore.y + paddingSizeAfter.y, s.featureChannels)
    }
    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        let c = src.featureChannels, sw = src.width, sh = src.height, dw = dest.width, dh = dest.height
        let s = src.simHWC()
        var out = [Float](repeating: 0, count: dw * dh * c)
        for y in 0..<dh {
            for x in 0..<dw {
                let o = (y * dw + x) * c
                if let iy = simEdge(y - paddingSizeBefore.y, sh), let ix = simEdge(x - paddingSizeBefore.x, sw) {
                    for ch in 0..<c { out[o + ch] = s[(iy * sw + ix) * c + ch] }
                } else if edgeMode == .constant {
                    for ch in 0..<c { out[o + ch] = fillValue }
                }
            }
        }
        out.withUnsafeBufferPointer { dest.simSetHWC($0.baseAddress!, stride: c, channels: c, channelOffset: destinationFeatureChannelOffset) }
    }
}

// MARK: - Reductions (MPSNNReduce.h, iOS 11.3 / macOS 10.13.4)

/// MPSNNReduce.h MPSNNReduceUnary (an MPSCNNKernel) and its subclasses: MPSNNReduceRow{Min,Max,
/// Mean,Sum} "returning the ... for each row of an image" (destination width 1),
/// MPSNNReduceColumn* "for each column" (height 1), MPSNNReduceFeatureChannels* over the
/// feature channels of each pixel (1 channel). `.spatial` models MPSNNReductionSpatialMeanNode
/// (MPSNNGraphNodes.h, iOS 12.1: the mean over the whole width x height of each channel).
/// Mean divides the sum by the number of reduced values.
class SimReduction: MPSCNNKernel {
    enum Axis { case row, column, spatial, featureChannels }
    enum Op { case min, max, mean, sum }
    let simAxis: Axis
    let simOp: Op
    init(device: MTLDevice, axis: Axis, op: Op) {
        simAxis = axis
        simOp = op
        super.init(device: device)
    }
    override func simDefaultDestination(_ sources: [MPSImage], method: MPSNNPaddingMethod) -> (w: Int, h: Int, c: Int) {
        let s = sources[0]
        switch simAxis {
        case .row: return (1, s.height, s.featureChannels)
        case .column: return (s.width, 1, s.featureChannels)
        case .spatial: return (1, 1, s.featureChannels)
        case .featureChannels: return (s.width, s.height, 1)
        }
    }
    override func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let src = sources[0]
        let c = src.featureChannels, sw = src.width, sh = src.height
        let s = src.simHWC()
        let dw = dest.width, dh = dest.height, dc = dest.featureChannels
        var out = [Float](repeating: 0, count: dw * dh * dc)
        // The values one destination element reduces: (x, y, channel) ranges of the source.
        for y in 0..<dh {
            for x in 0..<dw {
                for ch in 0..<dc {
                    let xs = simAxis == .row || simAxis == .spatial ? 0..<sw : x..<(x + 1)
                    let ys = simAxis == .column || simAxis == .spatial ? 0..<sh : y..<(y + 1)
                    let cs = simAxis == .featureChannels ? 0..<c : ch..<(ch + 1)
                    var acc: Float = simOp == .min ? Float.infinity : (simOp == .max ? -Float.infinity : 0)
                    var n = 0
                    for yy in ys {
                        for xx in xs {
                            for cc in cs {
                                let v = s[(yy * sw + xx) * c + cc]
                                switch simOp {
                                case .min: acc = v.isNaN || acc.isNaN ? Float.nan : Swift.min(acc, v)
                                case .max: acc = v.isNaN || acc.isNaN ? Float.nan : Swift.max(acc, v)
                                case .mean, .sum: acc += v
                                }
                                n += 1
                            }
                        }
                    }
                    out[(y * dw + x) * dc + ch] = simOp == .mean ? acc / Float(n) : acc
                }
            }
        }
        out.withUnsafeBufferPointer { dest.simSetHWC($0.baseAddress!, stride: dc, channels: dc, channelOffset: destinationFeatureChannelOffset) }
    }
}

class MPSNNReduceUnary: SimReduction {}
class MPSNNReduceRowMin: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .row, op: .min) } }
class MPSNNReduceRowMax: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .row, op: .max) } }
class MPSNNReduceRowMean: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .row, op: .mean) } }
class MPSNNReduceRowSum: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .row, op: .sum) } }
class MPSNNReduceColumnMin: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .column, op: .min) } }
class MPSNNReduceColumnMax: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .column, op: .max) } }
class MPSNNReduceColumnMean: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .column, op: .mean) } }
class MPSNNReduceColumnSum: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .column, op: .sum) } }
class MPSNNReduceFeatureChannelsMin: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .featureChannels, op: .min) } }
class MPSNNReduceFeatureChannelsMax: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .featureChannels, op: .max) } }
class MPSNNReduceFeatureChannelsMean: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .featureChannels, op: .mean) } }
class MPSNNReduceFeatureChannelsSum: MPSNNReduceUnary { public init(device: MTLDevice) { super.init(device: device, axis: .featureChannels, op: .sum) } }
