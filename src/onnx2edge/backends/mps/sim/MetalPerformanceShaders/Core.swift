// CPU model of MetalPerformanceShaders: core types, MPSImage, descriptors and data-source
// protocols. Every public declaration is Apple's Swift interface of the framework (spelling,
// labels, optionality, @available), as listed with its source in
// src/onnx2edge/backends/mps/apple_api.py; tests/test_mps.py holds the two together. What the
// model needs beyond Apple's API is internal, or `@_spi(Sim)` (invisible to generated code,
// which imports the module plainly). Semantics follow the headers (MPSCoreTypes.h, MPSImage.h,
// MPSCNNConvolution.h, MPSCNNNeuronType.h, MPSNeuralNetworkTypes.h); where a header is silent
// the comment says the behaviour is a guess.
//
// Objective-C `@optional` protocol members cannot be declared in Swift on Linux (no
// Objective-C runtime): they are protocol requirements with defaults in an extension, which
// is how a conforming type sees them (implement it, or get the documented default).

import Foundation
@_exported @_spi(Sim) import Metal

// MARK: - Core types (MPSCoreTypes.h; Swift: Xcode 12 SDK MetalPerformanceShaders.swift)

/// MPSCoreTypes.h `MPSOffset` (a C struct: no Equatable in Swift).
public struct MPSOffset {
    public var x: Int
    public var y: Int
    public var z: Int
    public init() { x = 0; y = 0; z = 0 }
    public init(x: Int, y: Int, z: Int) {
        self.x = x
        self.y = y
        self.z = z
    }
}

/// MPSCoreTypes.h `MPSImageCoordinate`.
public struct MPSImageCoordinate {
    public var x: Int
    public var y: Int
    public var channel: Int
    public init() { x = 0; y = 0; channel = 0 }
    public init(x: Int, y: Int, channel: Int) {
        self.x = x
        self.y = y
        self.channel = channel
    }
}

/// MPSCoreTypes.h `MPSImageEdgeMode`: how a kernel reads pixels outside its source image.
public enum MPSImageEdgeMode: UInt {
    case zero = 0  // out-of-bounds pixels read as 0
    case clamp = 1  // coordinates are clamped to the edge
    @available(iOS 12.1, macOS 10.14.1, *)
    case mirror = 2  // reflected about the edge pixel centre: -1 -> 1 (ONNX Pad 'reflect')
    @available(iOS 12.1, macOS 10.14.1, *)
    case mirrorWithEdge = 3  // reflected about the edge: -1 -> 0
    @available(iOS 12.1, macOS 10.14.1, *)
    case constant = 4  // read as the kernel's fill value
}

/// MPSCoreTypes.h `MPSDataType` (an NS_ENUM of uint32_t, so a Swift enum whose
/// `init?(rawValue:)` is failable). Values: floatBit 0x10000000, signedBit 0x20000000,
/// normalizedBit 0x40000000, or'ed with the bit width.
public enum MPSDataType: UInt32 {
    case invalid = 0
    case floatBit = 0x1000_0000
    case float32 = 0x1000_0020
    @available(iOS 11.0, macOS 10.13, *)
    case float16 = 0x1000_0010
    case signedBit = 0x2000_0000
    case int8 = 0x2000_0008
    case int16 = 0x2000_0010
    case int32 = 0x2000_0020
    case uInt8 = 8
    case uInt16 = 16
    case uInt32 = 32
    @available(iOS 11.0, macOS 10.13, *)
    case normalizedBit = 0x4000_0000
    @available(iOS 11.0, macOS 10.13, *)
    case unorm1 = 0x4000_0001
    @available(iOS 11.0, macOS 10.13, *)
    case unorm8 = 0x4000_0008
}

/// MPSImage.h `MPSImageFeatureChannelFormat` (a subset of its cases).
public enum MPSImageFeatureChannelFormat: UInt {
    case none = 0, unorm8, unorm16, float16, float32
}

/// MPSImage.h `MPSDataLayout`: `featureChannelsxHeightxWidth` is ONNX's CHW order for one image.
@available(iOS 11.0, macOS 10.13, *)
public enum MPSDataLayout: UInt {
    case HeightxWidthxFeatureChannels = 0
    case featureChannelsxHeightxWidth = 1
}

/// MPSCNNConvolution.h `MPSCNNConvolutionWeightsLayout`.
public enum MPSCNNConvolutionWeightsLayout: UInt32 {
    @available(iOS 13.0, macOS 10.15, *)
    case OHWI = 0
}

/// MPSKernel.h `MPSKernelOptions` (none of its options are modelled).
public struct MPSKernelOptions: OptionSet {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
}

// MARK: - Half precision helpers (storage format of .float16 images and weights)

@inline(__always) func roundToHalf(_ x: Float) -> Float { Float(Float16(x)) }

func halfBitsToFloat(_ p: UnsafeRawPointer, count: Int) -> [Float] {
    let h = p.bindMemory(to: Float16.self, capacity: count)
    return (0..<count).map { Float(h[$0]) }
}

func floatsFrom(_ p: UnsafeRawPointer, count: Int, type: MPSDataType) -> [Float] {
    if type == .float16 { return halfBitsToFloat(p, count: count) }
    precondition(type == .float32, "CPU model of MPS: weights of data type \(type.rawValue) are not modelled")
    return Array(UnsafeBufferPointer(start: p.bindMemory(to: Float.self, capacity: count), count: count))
}

// MARK: - MPSImageDescriptor / MPSImage (MPSImage.h)

/// MPSImage.h `MPSImageDescriptor` (iOS 10 / macOS 10.13).
open class MPSImageDescriptor: NSObject {
    public var channelFormat: MPSImageFeatureChannelFormat
    public var width: Int
    public var height: Int
    public var featureChannels: Int
    public var numberOfImages: Int = 1
    /// MPSImage.h: default MTLTextureUsageShaderRead | MTLTextureUsageShaderWrite.
    public var usage: MTLTextureUsage = [.shaderRead, .shaderWrite]

    public init(channelFormat: MPSImageFeatureChannelFormat, width: Int, height: Int, featureChannels: Int) {
        self.channelFormat = channelFormat
        self.width = width
        self.height = height
        self.featureChannels = featureChannels
    }

    public init(
        channelFormat: MPSImageFeatureChannelFormat, width: Int, height: Int, featureChannels: Int,
        numberOfImages: Int, usage: MTLTextureUsage
    ) {
        self.channelFormat = channelFormat
        self.width = width
        self.height = height
        self.featureChannels = featureChannels
        self.numberOfImages = numberOfImages
        self.usage = usage
    }
}

/// MPSImage.h `MPSImageAllocator <NSObject, NSSecureCoding>` (the @optional batch method is
/// not modelled).
public protocol MPSImageAllocator: NSObjectProtocol, NSSecureCoding {
    func image(for cmdBuf: MTLCommandBuffer, imageDescriptor descriptor: MPSImageDescriptor, kernel: MPSKernel) -> MPSImage
}

/// The two allocators MPS provides: MPSImage.defaultAllocator() makes images the CPU can read;
/// MPSTemporaryImage.defaultAllocator() makes MPSTemporaryImages, which "are private storage"
/// (MPSImage.h: they "may not be read or written by the CPU").
final class SimImageAllocator: NSObject, MPSImageAllocator {
    let temporary: Bool
    init(temporary: Bool) { self.temporary = temporary }
    func image(for cmdBuf: MTLCommandBuffer, imageDescriptor descriptor: MPSImageDescriptor, kernel: MPSKernel) -> MPSImage {
        temporary ? MPSTemporaryImage(simDevice: cmdBuf.device, imageDescriptor: descriptor)
            : MPSImage(device: cmdBuf.device, imageDescriptor: descriptor)
    }
    static var supportsSecureCoding: Bool { true }
    func encode(with coder: NSCoder) { coder.encode(temporary, forKey: "temporary") }
    init?(coder: NSCoder) { temporary = coder.decodeBool(forKey: "temporary") }
}

/// An MPSImage stores feature channels in slices of 4 (texture2DArray of RGBA pixels,
/// MPSImage.h: "feature channels are stored in slices of 4"): channel c of pixel (x, y) is
/// component c % 4 of slice c / 4. Storage here is `[slice][y][x][4]`; channels past
/// `featureChannels` in the last slice exist and read as 0.
///
/// CPU reads: an image a GPU kernel wrote must be synchronised before readBytes
/// (MPSImage.h synchronizeOnCommandBuffer: needed for MTLStorageModeManaged textures, i.e.
/// macOS with a discrete GPU; harmless elsewhere). The model is that Mac: readBytes of a
/// GPU-written image without synchronize(on:) in the same command buffer stops the program.
open class MPSImage: NSObject {
    public let device: MTLDevice
    public let width: Int
    public let height: Int
    public let featureChannels: Int
    public let numberOfImages: Int
    public let featureChannelFormat: MPSImageFeatureChannelFormat
    public let usage: MTLTextureUsage
    public var label: String?
    /// The texture contents (not Apple's API).
    @_spi(Sim) public var simStorage: [Float]
    /// Written by a GPU kernel and not synchronised since.
    var simNeedsSync = false

    @_spi(Sim) public var simSlices: Int { (featureChannels + 3) / 4 }

    /// MPSImage.h `defaultAllocator`: permanent images (MPSImage).
    open class func defaultAllocator() -> MPSImageAllocator { SimImageAllocator(temporary: false) }

    public init(device: MTLDevice, imageDescriptor: MPSImageDescriptor) {
        precondition(imageDescriptor.numberOfImages == 1, "CPU model of MPS: batches are not modelled")
        self.device = device
        width = imageDescriptor.width
        height = imageDescriptor.height
        featureChannels = imageDescriptor.featureChannels
        numberOfImages = imageDescriptor.numberOfImages
        featureChannelFormat = imageDescriptor.channelFormat
        usage = imageDescriptor.usage
        simStorage = [Float](repeating: 0, count: ((featureChannels + 3) / 4) * width * height * 4)
    }

    @inline(__always) func simIndex(x: Int, y: Int, channel c: Int) -> Int {
        (((c >> 2) * height + y) * width + x) * 4 + (c & 3)
    }

    /// Values are stored at the image's precision: a .float16 image rounds what it holds.
    func simStore(_ v: Float, x: Int, y: Int, channel: Int) {
        simStorage[simIndex(x: x, y: y, channel: channel)] = featureChannelFormat == .float16 ? roundToHalf(v) : v
    }

    /// Channels `[0, featureChannels)` as a contiguous HWC buffer with `stride` floats a pixel.
    func simHWC(stride: Int? = nil) -> [Float] {
        let cs = stride ?? featureChannels
        var out = [Float](repeating: 0, count: width * height * cs)
        simStorage.withUnsafeBufferPointer { s in
            out.withUnsafeMutableBufferPointer { o in
                for c in 0..<min(featureChannels, cs) {
                    let base = (c >> 2) * height * width * 4 + (c & 3)
                    for p in 0..<(width * height) { o[p * cs + c] = s[base + p * 4] }
                }
            }
        }
        return out
    }

    /// Write HWC values (`stride` floats a pixel) into channels starting at `channelOffset`.
    func simSetHWC(_ hwc: UnsafePointer<Float>, stride: Int, channels: Int, channelOffset: Int = 0) {
        let half = featureChannelFormat == .float16
        simStorage.withUnsafeMutableBufferPointer { s in
            for c in 0..<channels {
                let dc = c + channelOffset
                let base = (dc >> 2) * height * width * 4 + (dc & 3)
                for p in 0..<(width * height) {
                    let v = hwc[p * stride + c]
                    s[base + p * 4] = half ? roundToHalf(v) : v
                }
            }
        }
    }

    /// MPSImage.h readBytes (iOS 11 / macOS 10.13): one image, in the image's pixel type.
    @available(iOS 11.0, macOS 10.13, *)
    public func readBytes(_ dataBytes: UnsafeMutableRawPointer, dataLayout: MPSDataLayout, imageIndex: Int) {
        // fatalError, not precondition: -O builds keep its message.
        if self is MPSTemporaryImage {
            fatalError("MPSImage.readBytes on an MPSTemporaryImage: temporary images are private GPU storage "
                       + "(MPSImage.h); give the image node imageAllocator = MPSImage.defaultAllocator()")
        }
        if simNeedsSync {
            fatalError("MPSImage.readBytes before synchronize(on:): a GPU-written image must be synchronised "
                       + "for the CPU (MPSImage.h, managed storage on macOS)")
        }
        precondition(imageIndex == 0)
        let n = width * height * featureChannels
        let hwc = simHWC()
        var ordered = hwc
        if dataLayout == .featureChannelsxHeightxWidth {
            for p in 0..<(width * height) {
                for c in 0..<featureChannels { ordered[c * width * height + p] = hwc[p * featureChannels + c] }
            }
        }
        if featureChannelFormat == .float16 {
            let h = dataBytes.bindMemory(to: Float16.self, capacity: n)
            for i in 0..<n { h[i] = Float16(ordered[i]) }
        } else {
            let f = dataBytes.bindMemory(to: Float.self, capacity: n)
            for i in 0..<n { f[i] = ordered[i] }
        }
    }

    /// MPSImage.h writeBytes (iOS 11 / macOS 10.13).
    @available(iOS 11.0, macOS 10.13, *)
    public func writeBytes(_ dataBytes: UnsafeRawPointer, dataLayout: MPSDataLayout, imageIndex: Int) {
        precondition(!(self is MPSTemporaryImage), "MPSImage.writeBytes on an MPSTemporaryImage (private storage)")
        precondition(imageIndex == 0)
        let n = width * height * featureChannels
        let values = featureChannelFormat == .float16
            ? halfBitsToFloat(dataBytes, count: n) : floatsFrom(dataBytes, count: n, type: .float32)
        var hwc = values
        if dataLayout == .featureChannelsxHeightxWidth {
            for p in 0..<(width * height) {
                for c in 0..<featureChannels { hwc[p * featureChannels + c] = values[c * width * height + p] }
            }
        }
        hwc.withUnsafeBufferPointer { simSetHWC($0.baseAddress!, stride: featureChannels, channels: featureChannels) }
    }

    /// MPSImage.h synchronizeOnCommandBuffer: (iOS 11.3 / macOS 10.13.4): makes what the GPU
    /// wrote before it in `commandBuffer` visible to the CPU once the buffer completes.
    @available(iOS 11.3, macOS 10.13.4, *)
    public func synchronize(on commandBuffer: MTLCommandBuffer) {
        simEnqueue(commandBuffer) { self.simNeedsSync = false }
    }
}

/// MPSImage.h `MPSTemporaryImage`: GPU-private storage the graph may recycle; its
/// defaultAllocator is what MPSNNImageNode.imageAllocator defaults to (MPSNNGraphNodes.h:
/// an exported node's "image is still temporary. See MPSNNImageNode.imageAllocator").
open class MPSTemporaryImage: MPSImage {
    /// MPSImage.h: how many more kernels read the image before it is recycled (not modelled).
    public var readCount: Int = 1
    init(simDevice: MTLDevice, imageDescriptor: MPSImageDescriptor) {
        super.init(device: simDevice, imageDescriptor: imageDescriptor)
    }
    override open class func defaultAllocator() -> MPSImageAllocator { SimImageAllocator(temporary: true) }
}

/// Encode CPU work into a command buffer of the Metal model.
func simEnqueue(_ commandBuffer: MTLCommandBuffer, _ work: @escaping () -> Void) {
    guard let buffer = commandBuffer as? SimCommandBuffer else {
        fatalError("CPU model of MPS: command buffer \(type(of: commandBuffer)) is not the Metal model's")
    }
    buffer.simEnqueue(work)
}

// MARK: - Neurons (MPSCNNNeuronType.h, MPSCNNNeuron.h)

/// MPSCNNNeuronType.h `MPSCNNNeuronType` (Swift: Xcode 12 SDK; power, exponential, logarithm
/// iOS 11.3 / macOS 10.13.4; geLU iOS 13 / macOS 10.15).
public enum MPSCNNNeuronType: Int32 {
    case none = 0, reLU, linear, sigmoid, hardSigmoid, tanH, absolute, softPlus, softSign, ELU,
        pReLU, reLUN
    @available(iOS 11.3, macOS 10.13.4, *)
    case power
    @available(iOS 11.3, macOS 10.13.4, *)
    case exponential
    @available(iOS 11.3, macOS 10.13.4, *)
    case logarithm
    @available(iOS 13.0, macOS 10.15, *)
    case geLU
}

/// MPSCNNNeuron.h `MPSNNNeuronDescriptor` (iOS 11.3 / macOS 10.13.4): made only by its class
/// methods (its `init` is unavailable).
@available(iOS 11.3, macOS 10.13.4, *)
open class MPSNNNeuronDescriptor: NSObject, NSCopying {
    public var neuronType: MPSCNNNeuronType = .none
    public var a: Float = 0
    public var b: Float = 0
    public var c: Float = 0
    public var data: Data?

    override init() {}

    public class func cnnNeuronDescriptor(with neuronType: MPSCNNNeuronType) -> MPSNNNeuronDescriptor {
        cnnNeuronDescriptor(with: neuronType, a: 0, b: 0, c: 0)
    }
    public class func cnnNeuronDescriptor(with neuronType: MPSCNNNeuronType, a: Float) -> MPSNNNeuronDescriptor {
        cnnNeuronDescriptor(with: neuronType, a: a, b: 0, c: 0)
    }
    public class func cnnNeuronDescriptor(with neuronType: MPSCNNNeuronType, a: Float, b: Float) -> MPSNNNeuronDescriptor {
        cnnNeuronDescriptor(with: neuronType, a: a, b: b, c: 0)
    }
    public class func cnnNeuronDescriptor(
        with neuronType: MPSCNNNeuronType, a: Float, b: Float, c: Float
    ) -> MPSNNNeuronDescriptor {
        precondition(neuronType != .pReLU, "use cnnNeuronPReLUDescriptor(with:noCopy:) for PReLU")
        let d = MPSNNNeuronDescriptor()
        d.neuronType = neuronType
        d.a = a
        d.b = b
        d.c = c
        return d
    }
    /// PReLU: one `a` per feature channel, as Float32 values in `data`.
    public class func cnnNeuronPReLUDescriptor(with data: Data, noCopy: Bool) -> MPSNNNeuronDescriptor {
        let d = MPSNNNeuronDescriptor()
        d.neuronType = .pReLU
        d.data = data
        return d
    }

    public func copy(with zone: NSZone? = nil) -> Any {
        let d = MPSNNNeuronDescriptor()
        d.neuronType = neuronType
        d.a = a
        d.b = b
        d.c = c
        d.data = data
        return d
    }
}

/// The functions of MPSCNNNeuronType.h, applied in place to `count` values of one channel.
struct SimNeuron {
    let type: MPSCNNNeuronType
    let a: Float
    let b: Float
    let c: Float
    let perChannelA: [Float]

    init(_ d: MPSNNNeuronDescriptor) {
        type = d.neuronType
        a = d.a
        b = d.b
        c = d.c
        if let data = d.data {
            perChannelA = data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        } else {
            perChannelA = []
        }
    }

    @inline(__always) func f(_ x: Float, _ channel: Int) -> Float {
        switch type {
        case .none: return x
        case .reLU: return x >= 0 ? x : a * x
        case .linear: return a * x + b
        case .sigmoid: return 1 / (1 + expf(-x))
        case .hardSigmoid: return min(max(a * x + b, 0), 1)
        case .tanH: return a * tanhf(b * x)
        case .absolute: return abs(x)
        case .softPlus: return a * log1pf(expf(b * x))
        case .softSign: return x / (1 + abs(x))
        case .ELU: return x >= 0 ? x : a * (expf(x) - 1)
        case .pReLU: return x >= 0 ? x : perChannelA[channel] * x
        case .reLUN: return min(x >= 0 ? x : a * x, b)
        case .power: return powf(a * x + b, c)
        // MPSCNNNeuronType.h: exponential and logarithm use base e when c == -1.
        case .exponential: return c == -1 ? expf(a * x + b) : powf(c, a * x + b)
        case .logarithm: return c == -1 ? logf(a * x + b) : logf(a * x + b) / logf(c)
        case .geLU: return 0.5 * x * (1 + erff(x * 0.70710678118654752))
        }
    }

    /// Apply to an HWC buffer of `pixels` pixels with `channels` values each.
    func apply(_ p: UnsafeMutablePointer<Float>, pixels: Int, channels: Int) {
        if type == .none { return }
        if type == .reLU && a == 0 {
            for i in 0..<(pixels * channels) { p[i] = max(p[i], 0) }
            return
        }
        for px in 0..<pixels {
            let q = p + px * channels
            for ch in 0..<channels { q[ch] = f(q[ch], ch) }
        }
    }
}

// MARK: - Convolution descriptors (MPSCNNConvolution.h)

/// MPSCNNConvolution.h `MPSCNNConvolutionDescriptor` (iOS 10 / macOS 10.13).
open class MPSCNNConvolutionDescriptor: NSObject, NSCopying {
    public var kernelWidth: Int
    public var kernelHeight: Int
    public var inputFeatureChannels: Int
    public var outputFeatureChannels: Int
    public var strideInPixelsX: Int = 1
    public var strideInPixelsY: Int = 1
    public var groups: Int = 1
    public var dilationRateX: Int = 1
    public var dilationRateY: Int = 1
    /// MPSCNNConvolution.h: `MPSNNNeuronDescriptor * __nonnull fusedNeuronDescriptor`, imported
    /// as a non-optional property: only a descriptor can be assigned. What the getter returns
    /// before one is set the header does not say; modelled (a guess) as neuron type none.
    @available(iOS 11.3, macOS 10.13.4, *)
    public var fusedNeuronDescriptor: MPSNNNeuronDescriptor = MPSNNNeuronDescriptor.cnnNeuronDescriptor(with: .none)
    var simBatchNorm: (mean: [Float], variance: [Float], gamma: [Float]?, beta: [Float]?, epsilon: Float)?

    @available(iOS 11.0, macOS 10.13, *)
    public required init(kernelWidth: Int, kernelHeight: Int, inputFeatureChannels: Int, outputFeatureChannels: Int) {
        self.kernelWidth = kernelWidth
        self.kernelHeight = kernelHeight
        self.inputFeatureChannels = inputFeatureChannels
        self.outputFeatureChannels = outputFeatureChannels
    }

    /// MPSCNNConvolution.h: folds inference batch normalization into the convolution.
    @available(iOS 11.0, macOS 10.13, *)
    public func setBatchNormalizationParametersForInferenceWithMean(
        _ mean: UnsafePointer<Float>?, variance: UnsafePointer<Float>?, gamma: UnsafePointer<Float>?,
        beta: UnsafePointer<Float>?, epsilon: Float
    ) {
        let n = outputFeatureChannels
        func arr(_ p: UnsafePointer<Float>?) -> [Float]? { p.map { Array(UnsafeBufferPointer(start: $0, count: n)) } }
        simBatchNorm = (arr(mean) ?? [Float](repeating: 0, count: n), arr(variance) ?? [Float](repeating: 1, count: n),
                        arr(gamma), arr(beta), epsilon)
    }

    public func copy(with zone: NSZone? = nil) -> Any {
        let d = Self(kernelWidth: kernelWidth, kernelHeight: kernelHeight,
                     inputFeatureChannels: inputFeatureChannels, outputFeatureChannels: outputFeatureChannels)
        d.strideInPixelsX = strideInPixelsX
        d.strideInPixelsY = strideInPixelsY
        d.groups = groups
        d.dilationRateX = dilationRateX
        d.dilationRateY = dilationRateY
        d.fusedNeuronDescriptor = fusedNeuronDescriptor
        d.simBatchNorm = simBatchNorm
        return d
    }
}

/// MPSCNNConvolution.h: depthwise convolution; weights are `[outputFeatureChannels][kH][kW]`
/// ("Weights [inputFeatureChannels][channelMultiplier][kH][kW]"), channel multiplier 1 only.
@available(iOS 11.0, macOS 10.13, *)
open class MPSCNNDepthWiseConvolutionDescriptor: MPSCNNConvolutionDescriptor {
    public var channelMultiplier: Int { outputFeatureChannels / inputFeatureChannels }
}

// MARK: - Data sources

/// MPSCNNConvolution.h `MPSCNNConvolutionDataSource <NSCopying, NSObject>`.
public protocol MPSCNNConvolutionDataSource: NSObjectProtocol, NSCopying {
    func dataType() -> MPSDataType
    func descriptor() -> MPSCNNConvolutionDescriptor
    func weights() -> UnsafeMutableRawPointer
    func biasTerms() -> UnsafeMutablePointer<Float>?
    func load() -> Bool
    func purge()
    func label() -> String?
    // @optional in Apple's header:
    @available(iOS 13.0, macOS 10.15, *)
    func weightsLayout() -> MPSCNNConvolutionWeightsLayout
    /// MPSCNNConvolution.h (iOS 14 / macOS 11): the precision the kernel keeps the weights
    /// in; "when kernelWeightsDataType is unimplemented the kernel will use float16 precision".
    @available(iOS 14.0, macOS 11.0, *)
    func kernelWeightsDataType() -> MPSDataType
}

extension MPSCNNConvolutionDataSource {
    public func weightsLayout() -> MPSCNNConvolutionWeightsLayout { .OHWI }
    /// Unimplemented: `.invalid` tells the model to do what the header says (float16 weights).
    public func kernelWeightsDataType() -> MPSDataType { .invalid }
}

/// The precision a convolution keeps `source`'s weights in on iOS 14 / macOS 11 and later.
func simKernelWeightsType(_ source: MPSCNNConvolutionDataSource) -> MPSDataType {
    let t = source.kernelWeightsDataType()
    return t == .invalid ? .float16 : t
}

/// MPSCNNInstanceNormalization.h `MPSCNNInstanceNormalizationDataSource <NSObject, NSCopying>`
/// (iOS 11.3 / macOS 10.13.4).
@available(iOS 11.3, macOS 10.13.4, *)
public protocol MPSCNNInstanceNormalizationDataSource: NSObjectProtocol, NSCopying {
    var numberOfFeatureChannels: Int { get }
    func gamma() -> UnsafeMutablePointer<Float>?
    func beta() -> UnsafeMutablePointer<Float>?
    func label() -> String?
    // `initWithCoder:` is @optional in the header, but Swift has no optional initialisers:
    // Apple's Swift interface makes it a required member of the protocol.
    init?(coder aDecoder: NSCoder)
    // @optional in Apple's header:
    func epsilon() -> Float
    @available(iOS 13.0, macOS 10.15, *)
    func load() -> Bool
    @available(iOS 13.0, macOS 10.15, *)
    func purge()
}

extension MPSCNNInstanceNormalizationDataSource {
    /// MPSCNNInstanceNormalization.h: without -epsilon the kernel uses FLT_MIN.
    public func epsilon() -> Float { Float.leastNormalMagnitude }
    public func load() -> Bool { true }
    public func purge() {}
}

// MARK: - Handles and padding (MPSNeuralNetworkTypes.h, MPSNNGraphNodes.h)

/// MPSNNGraphNodes.h `MPSHandle <NSSecureCoding, NSObject>`.
public protocol MPSHandle: NSObjectProtocol, NSSecureCoding {
    func label() -> String?
}

/// MPSNeuralNetworkTypes.h `MPSNNPaddingMethod` with its MPS_SWIFT_NAMEs: AlignCentered is
/// `.centered`, AddRemainderToTopLeft `.topLeft`, SizeValidOnly `.validOnly` (iOS 11 /
/// macOS 10.13; customWhitelistForNodeFusion iOS 12 / macOS 10.14).
public struct MPSNNPaddingMethod: OptionSet {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let centered = MPSNNPaddingMethod([])
    public static let alignTopLeft = MPSNNPaddingMethod(rawValue: 1)
    public static let alignBottomRight = MPSNNPaddingMethod(rawValue: 2)
    public static let topLeft = MPSNNPaddingMethod([])
    public static let addRemainderToTopRight = MPSNNPaddingMethod(rawValue: 1 << 2)
    public static let addRemainderToBottomLeft = MPSNNPaddingMethod(rawValue: 2 << 2)
    public static let addRemainderToBottomRight = MPSNNPaddingMethod(rawValue: 3 << 2)
    public static let validOnly = MPSNNPaddingMethod([])
    public static let sizeSame = MPSNNPaddingMethod(rawValue: 1 << 4)
    public static let sizeFull = MPSNNPaddingMethod(rawValue: 2 << 4)
    @available(iOS 12.0, macOS 10.14, *)
    public static let customWhitelistForNodeFusion = MPSNNPaddingMethod(rawValue: 1 << 13)
    public static let custom = MPSNNPaddingMethod(rawValue: 1 << 14)
    public static let excludeEdges = MPSNNPaddingMethod(rawValue: 1 << 15)
}

/// MPSNeuralNetworkTypes.h `MPSNNPadding <NSObject, NSSecureCoding>`.
public protocol MPSNNPadding: NSObjectProtocol, NSSecureCoding {
    func paddingMethod() -> MPSNNPaddingMethod
    // @optional in Apple's header:
    func label() -> String
    @available(iOS 11.0, macOS 10.13, *)
    func destinationImageDescriptor(
        forSourceImages sourceImages: [MPSImage], sourceStates: [MPSState]?, for kernel: MPSKernel,
        suggestedDescriptor inDescriptor: MPSImageDescriptor
    ) -> MPSImageDescriptor
}

extension MPSNNPadding {
    public func label() -> String { "\(type(of: self))" }
    public func destinationImageDescriptor(
        forSourceImages sourceImages: [MPSImage], sourceStates: [MPSState]?, for kernel: MPSKernel,
        suggestedDescriptor inDescriptor: MPSImageDescriptor
    ) -> MPSImageDescriptor { inDescriptor }
}

/// MPSState.h `MPSState` (none of its members are modelled).
@available(iOS 11.0, macOS 10.13, *)
open class MPSState: NSObject {}

/// MPSNeuralNetworkTypes.h `MPSNNDefaultPadding` (iOS 11 / macOS 10.13): a padding policy
/// that is just a padding method; Swift: `MPSNNDefaultPadding(method:)`.
@available(iOS 11.0, macOS 10.13, *)
public final class MPSNNDefaultPadding: NSObject, MPSNNPadding {
    let method: MPSNNPaddingMethod
    public init(method: MPSNNPaddingMethod) { self.method = method }
    public func paddingMethod() -> MPSNNPaddingMethod { method }
    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) { coder.encode(Int(method.rawValue), forKey: "method") }
    public init?(coder: NSCoder) { method = MPSNNPaddingMethod(rawValue: UInt(coder.decodeInteger(forKey: "method"))) }
}
